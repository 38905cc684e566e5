"""A segment's files read in chunks, for every copy that sends them on: the client's
stream to the segment store and the copy scheduler's direct writes."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator
from pathlib import Path

from remotelog.core.model import LogSegmentData, SegmentFile
from remotelog.fileio.pagecache import pread_cached


async def file_chunks(source: Path | bytes, chunk_bytes: int) -> AsyncGenerator[bytes, None]:
    """At least one chunk (empty for an empty file), never the whole file in memory.

    A segment just rolled is in the page cache: its chunks are copied on the
    event loop, and only a chunk that must come from a disk takes a thread.
    """
    if isinstance(source, bytes):
        for start in range(0, max(len(source), 1), chunk_bytes):
            yield source[start : start + chunk_bytes]
        return
    with source.open("rb") as handle:
        fd, position = handle.fileno(), 0
        while True:
            data = pread_cached(fd, chunk_bytes, position)
            if data is None:
                data = await asyncio.to_thread(os.pread, fd, chunk_bytes, position)
            if data or not position:
                yield data
            if len(data) < chunk_bytes:
                return
            position += len(data)


async def segment_chunks(
    data: LogSegmentData, chunk_bytes: int
) -> AsyncGenerator[tuple[SegmentFile, int, bytes], None]:
    """(file, position within it, bytes) of every file of the segment, the log first.

    Close it (contextlib.aclosing) rather than leave it to the garbage collector:
    a copy that fails half-way closes the file it was reading.
    """
    for kind, source in data.files():
        position = 0
        async with contextlib.aclosing(file_chunks(source, chunk_bytes)) as pieces:
            async for piece in pieces:
                yield kind, position, piece
                position += len(piece)
