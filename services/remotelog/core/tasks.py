"""Small asyncio helpers shared by the services."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], *, recancel_s: float = 1.0) -> None:
    """Cancel the tasks and wait until every one has finished, whatever it raised.

    Tasks still running after `recancel_s` are cancelled again: on Python 3.11
    `asyncio.wait_for` can swallow a cancellation that races with its inner
    future completing (gh-86296), and a service loop that lost its only
    cancellation would keep running while its owner waits for it forever.
    """
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        done, pending = await asyncio.wait(pending, timeout=recancel_s)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: an error while stopping is not news


async def bounded_gather(
    calls: Iterable[Callable[[], Awaitable[object]]]
    | AsyncIterable[Callable[[], Awaitable[object]]],
    limit: int,
) -> None:
    """Await each call, at most `limit` at a time, taking them from `calls` (an iterable,
    or an async one, which may wait for the next) as they are needed. The first failure
    stops the others and is raised as it is."""
    if isinstance(calls, AsyncIterable):
        taking = asyncio.Lock()  # an async iterator is advanced by one worker at a time
        pending = aiter(calls)

        async def next_call() -> Callable[[], Awaitable[object]] | None:
            async with taking:
                return await anext(pending, None)
    else:
        remaining = iter(calls)

        async def next_call() -> Callable[[], Awaitable[object]] | None:
            return next(remaining, None)

    async def worker() -> None:
        while (call := await next_call()) is not None:  # shared: each takes the next
            await call()

    workers = [asyncio.ensure_future(worker()) for _ in range(max(1, limit))]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        await cancel_and_wait(workers)
        raise


async def in_thread_until_cancelled(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn(*args, stopped=<threading.Event>, **kwargs)` in a thread, as asyncio.to_thread.

    A thread cannot be cancelled: when the caller is, `stopped` is set, and the
    cancellation goes on only once `fn` has seen it and returned (`fn` checks it
    between steps short enough to wait for), so nothing `fn` opened outlives the
    caller's cleanup.
    """
    stopped = threading.Event()
    call = functools.partial(fn, *args, stopped=stopped, **kwargs)
    running = asyncio.get_running_loop().run_in_executor(None, call)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        stopped.set()
        with contextlib.suppress(Exception):
            await running
        raise


_END = object()


async def read_ahead(source: AsyncGenerator[T, None], depth: int) -> AsyncGenerator[T, None]:
    """`source`'s items in order, with up to `depth` of them fetched before they are asked for.

    A streamed response otherwise alternates between reading its source and
    sending to its caller; reading ahead overlaps the two (the backend keeps
    reading while gRPC waits for the peer's flow control), with memory bounded
    by `depth` items. Errors of the source come out where its items would.
    """
    queue: asyncio.Queue[Any] = asyncio.Queue(depth)

    async def pump() -> None:
        try:
            async for item in source:
                await queue.put(item)
        except Exception as exc:  # delivered in order, after the items read before it
            await queue.put(_Failure(exc))
            return
        await queue.put(_END)

    task = asyncio.create_task(pump())
    try:
        while (item := await queue.get()) is not _END:
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        await cancel_and_wait([task])
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()


@dataclass(frozen=True)
class _Failure:
    exc: Exception


A = TypeVar("A")


class BatchedCalls(Generic[A, T]):
    """Calls of one blocking function from many tasks, run together in one worker-thread hop.

    A hop to a worker thread (a wake-up each way and a GIL hand-off) costs
    several times what a small blocking call such as a directory scan costs
    itself. Calls made while a hop is pending or running
    join the next one, up to `max_batch` per hop; each caller gets its own
    result or its own exception. A cancelled caller's result is dropped.
    """

    def __init__(self, fn: Callable[[A], T], *, max_batch: int = 64) -> None:
        self._fn = fn
        self._max_batch = max_batch
        self._queue: list[tuple[A, asyncio.Future[T]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.hops = 0

    async def __call__(self, arg: A) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((arg, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return await future

    def _run_all(self, args: list[A]) -> list[tuple[bool, Any]]:
        results: list[tuple[bool, Any]] = []
        for arg in args:
            try:
                results.append((True, self._fn(arg)))
            except Exception as exc:
                results.append((False, exc))
        return results

    async def _flush(self) -> None:
        batch: list[tuple[A, asyncio.Future[T]]] = []
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                self.hops += 1
                results = await asyncio.to_thread(self._run_all, [arg for arg, _ in batch])
                for (_, future), (ok, value) in zip(batch, results, strict=True):
                    if future.done():
                        continue  # its caller was cancelled
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
                batch = []
        finally:
            # Cancelled (the loop is closing): nobody is left without an answer.
            for _, future in [*batch, *self._queue]:
                future.cancel()
            self._queue.clear()
            self._flusher = None
