"""Small asyncio helpers shared by the services."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

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
