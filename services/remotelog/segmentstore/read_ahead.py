"""Ranged reads of objects in chunks, the next ones asked for before a reader wants them.

Kafka reads a remote segment one fetch at a time: each FetchLogSegment asks for the
rest of the segment, is read for about one fetch's worth and closed. From S3 each call
used to open a GET to the segment's end, wait out the first-byte latency, and abandon
the rest, whose bytes kept flowing until S3 saw the close. Here a read is served from
chunks of `chunk_bytes`, one ranged GET each, and reading chunk k starts the GETs of
chunks k+1..k+ahead (no further than the read's end): the partition's next fetch finds
its bytes in memory, or on their way. The Kafka plugin does the same for the reads it
makes by URL (ReadAhead.java).

Bounds: `max_bytes` of chunks held or in flight; past it, no chunk is asked for ahead
and the oldest chunks no reader waits on are let go first. A chunk a reader asks for is
always fetched, so the bound can be passed by one chunk per reader. A chunk nobody
touched for `idle_s` (its reader stopped, or jumped elsewhere) is dropped, its GET
cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

# Bytes `first`..`last` of the object at `key`, fewer where it ends first.
Fetch = Callable[[str, int, int], Coroutine[Any, Any, bytes]]


def _nothing() -> None:
    return None


def _retrieve(task: asyncio.Task[bytes]) -> None:
    # A chunk fetched ahead may fail or be let go with nobody awaiting it; asyncio
    # would report its exception as never retrieved.
    if not task.cancelled():
        task.exception()


@dataclass
class _Chunk:
    task: asyncio.Task[bytes]
    ahead: bool  # asked for ahead of a reader, not by one
    waiters: int = 0  # readers awaiting it, which keep it from being let go
    touched: float = field(default_factory=time.monotonic)


class ReadAhead:
    def __init__(
        self,
        fetch: Fetch,
        *,
        chunk_bytes: int,
        ahead: int,
        max_bytes: int,
        idle_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        on_ahead: Callable[[], None] = _nothing,
        on_hit: Callable[[], None] = _nothing,
    ) -> None:
        self._fetch = fetch
        self._chunk_bytes = chunk_bytes
        self._ahead = ahead
        self._max_bytes = max_bytes
        self._idle_s = idle_s
        self._clock = clock
        self._on_ahead = on_ahead  # each chunk asked for ahead
        self._on_hit = on_hit  # each chunk a reader found held or on its way
        # By (key, chunk index), least recently used first: let go first.
        self._chunks: OrderedDict[tuple[str, int], _Chunk] = OrderedDict()
        self._closed = False

    def held(self) -> int:
        """Chunks held now, fetched or on their way."""
        return len(self._chunks)

    async def read(
        self, key: str, start: int, last: int, piece_bytes: int
    ) -> AsyncGenerator[memoryview, None]:
        """Bytes `start`..`last` (inclusive) of the object, fewer where it ends first, in
        pieces of at most `piece_bytes`."""
        size = self._chunk_bytes
        position = start
        while position <= last:
            index = position // size
            data = await self._chunk(key, index)
            self._fetch_ahead(key, index + 1, min(index + self._ahead, last // size))
            offset = position - index * size
            stop = min(len(data), last - index * size + 1)
            view = memoryview(data)
            while offset < stop:
                piece = view[offset : min(stop, offset + piece_bytes)]
                offset += len(piece)
                position += len(piece)
                yield piece
            if len(data) < size:
                return  # a short chunk: the object ends in it

    async def _chunk(self, key: str, index: int) -> bytes:
        """Chunk `index` of the object: found, awaited, or fetched now. One asked for
        ahead that failed is fetched again, once."""
        for again in (True, False):
            self._drop_idle()
            found = self._chunks.get((key, index))
            failed = found is not None and found.task.done() and not _succeeded(found.task)
            if found is None or failed:
                found = self._start(key, index, ahead=False)
            else:
                self._on_hit()
            self._chunks.move_to_end((key, index))
            found.waiters += 1
            try:
                # Shielded: a reader that goes away leaves the GET to the others.
                return await asyncio.shield(found.task)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._forget(key, index, found)
                if not found.ahead or not again:
                    raise
            finally:
                found.waiters -= 1
                found.touched = self._clock()
        raise AssertionError("unreachable")  # pragma: no cover

    def _start(self, key: str, index: int, *, ahead: bool) -> _Chunk:
        first = index * self._chunk_bytes
        task = asyncio.create_task(self._fetch(key, first, first + self._chunk_bytes - 1))
        task.add_done_callback(_retrieve)
        chunk = _Chunk(task, ahead, touched=self._clock())
        self._chunks[(key, index)] = chunk
        return chunk

    def _fetch_ahead(self, key: str, first: int, last: int) -> None:
        """Asks for chunks `first`..`last` that are neither held nor on their way."""
        for index in range(first, last + 1):
            if self._closed:
                return
            if (key, index) in self._chunks:
                continue
            if not self._make_room(key, first - 1, last):
                return
            self._start(key, index, ahead=True)
            self._on_ahead()

    def _make_room(self, key: str, first: int, last: int) -> bool:
        """True once one more chunk fits in max_bytes, after letting go of the oldest
        chunks no reader waits on, other than chunks `first`..`last` of `key`."""
        for (held_key, index), chunk in list(self._chunks.items()):
            if (len(self._chunks) + 1) * self._chunk_bytes <= self._max_bytes:
                break
            own = held_key == key and first <= index <= last
            if not own and chunk.waiters == 0:
                self._let_go(held_key, index)
        return (len(self._chunks) + 1) * self._chunk_bytes <= self._max_bytes

    def _drop_idle(self) -> None:
        now = self._clock()
        for (key, index), chunk in list(self._chunks.items()):
            if chunk.waiters == 0 and now - chunk.touched > self._idle_s:
                self._let_go(key, index)

    def _let_go(self, key: str, index: int) -> None:
        chunk = self._chunks.pop((key, index))
        chunk.task.cancel()

    def _forget(self, key: str, index: int, chunk: _Chunk) -> None:
        if self._chunks.get((key, index)) is chunk:
            del self._chunks[(key, index)]

    async def close(self) -> None:
        """Lets go of every chunk and waits for their GETs to end."""
        self._closed = True
        tasks = [chunk.task for chunk in self._chunks.values()]
        self._chunks.clear()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)


def _succeeded(task: asyncio.Task[bytes]) -> bool:
    return not task.cancelled() and task.exception() is None
