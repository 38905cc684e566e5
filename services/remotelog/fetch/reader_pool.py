"""The RemoteLogReader pool: at most `remote.log.reader.threads` reads at once, a bounded queue.

Reads are asyncio coroutines (they wait on the segment store, not on a CPU),
so a "thread" is a task, not a thread; the bound is the same as Kafka's: at
most `threads` reads run, at most `max_pending` wait, and a submission that
would overflow the queue is refused at once (READER_QUEUE_FULL) instead of
piling up. A read whose caller gave up (its future cancelled: the fetch
expired) is cancelled where it runs, or skipped if it has not started.

A read starts as its own task the moment a slot is free, and a finishing read
starts the next queued one: no long-lived worker sits between the caller and
its read. A worker taking each read from a queue costs two more turns of the
event loop per read (the worker's wake-up, then its wait on the read), which
is a good part of a Fetch served from the page cache.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from remotelog.core.errors import ReaderQueueFullError
from remotelog.core.tasks import cancel_and_wait

Job = tuple[Callable[[], Awaitable[Any]], "asyncio.Future[Any]", contextvars.Context]


class ReaderPool:
    def __init__(self, threads: int, max_pending: int) -> None:
        self.threads = threads
        self.max_pending = max_pending
        self._queue: collections.deque[Job] = collections.deque()
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False
        self._busy_s = 0.0
        self._window_start = time.monotonic()

    def start(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        while self._queue:
            _, future, _ = self._queue.popleft()
            future.cancel()
        await cancel_and_wait(list(self._running))

    @property
    def busy(self) -> int:
        """Reads running now."""
        return len(self._running)

    @property
    def queue_size(self) -> int:
        """Reads waiting for a free slot (Kafka's RemoteLogReaderTaskQueueSize)."""
        return len(self._queue)

    def submit_all(self, reads: list[Callable[[], Awaitable[Any]]]) -> list[asyncio.Future[Any]]:
        """Start or queue every read, or none: a fetch the queue cannot take is refused whole.

        As in Kafka's executor, a read a free slot takes at once does not wait
        in the queue; only the rest count against `max_pending`.
        """
        free = self.threads - self.busy
        waiting = len(self._queue)
        if waiting + len(reads) - free > self.max_pending:
            raise ReaderQueueFullError(
                f"the remote log reader queue holds {waiting} of "
                f"{self.max_pending} reads; {len(reads)} more do not fit",
                metadata={"pending": str(waiting), "max": str(self.max_pending)},
            )
        loop = asyncio.get_running_loop()
        futures = []
        # Each read runs in its fetch's context (its trace span), not in that of
        # whichever read's end starts it.
        context = contextvars.copy_context()
        for read in reads:
            future: asyncio.Future[Any] = loop.create_future()
            self._queue.append((read, future, context))
            futures.append(future)
        self._start_queued()
        return futures

    def idle_percent(self) -> float:
        """Share of slot time spent idle since the last call (RemoteLogReaderAvgIdlePercent)."""
        now = time.monotonic()
        window = (now - self._window_start) * self.threads
        busy = self._busy_s
        self._busy_s, self._window_start = 0.0, now
        return 100.0 if window <= 0 else max(0.0, 100.0 * (1 - busy / window))

    def _start_queued(self) -> None:
        while self._queue and len(self._running) < self.threads and not self._closed:
            read, future, context = self._queue.popleft()
            if future.done():
                continue  # its fetch completed or expired while it waited
            task = asyncio.get_running_loop().create_task(self._run(read, future), context=context)
            self._running.add(task)
            task.add_done_callback(functools.partial(self._finished, future))
            future.add_done_callback(_cancel_when_abandoned(task))

    async def _run(self, read: Callable[[], Awaitable[Any]], future: asyncio.Future[Any]) -> None:
        started = time.monotonic()
        try:
            result = await read()
        except asyncio.CancelledError:
            future.cancel()  # abandoned by its caller, or the pool is closing
            raise
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)
        finally:
            self._busy_s += time.monotonic() - started

    def _finished(self, future: asyncio.Future[Any], task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        future.cancel()  # no-op once answered; else the task was cancelled before it began
        self._start_queued()


def _cancel_when_abandoned(task: asyncio.Task[None]) -> Callable[[asyncio.Future[Any]], None]:
    def on_done(future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            task.cancel()

    return on_done
