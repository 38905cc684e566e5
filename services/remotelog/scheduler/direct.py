"""Copying segments straight into the storage backend, as Kafka's broker calls its RSM in-process.

With `remote.log.manager.direct.storage.write.enabled` the copy scheduler opens
the backend the segment store serves (the `storage.*` settings) and runs the
same SegmentStore in its own process: the same objects, manifests and custom
metadata, without streaming every segment byte through a second service. A
file goes from the broker's disk to the backend in reads of a part each; the
gRPC hop framed, sent, received and sliced every byte again, in two processes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable
from typing import TypeVar

from remotelog.core.deadline import deadline_after
from remotelog.core.errors import DeadlineExceededError
from remotelog.core.model import LogSegmentData, RemoteLogSegmentMetadata
from remotelog.fileio.segment_chunks import segment_chunks
from remotelog.segmentstore.store import SegmentChunk, SegmentStore

T = TypeVar("T")


class DirectSegmentWriter:
    """The scheduler's SegmentDataCopier port over an in-process SegmentStore.

    Files are read in pieces of `read_bytes` (at least the backend's part size,
    so a segment that fits one part goes to the backend as the very bytes read):
    memory stays bounded whatever the segment's size.
    """

    def __init__(self, store: SegmentStore, read_bytes: int) -> None:
        self.store = store
        self.read_bytes = read_bytes

    async def _chunks(self, data: LogSegmentData) -> AsyncGenerator[SegmentChunk, None]:
        async with contextlib.aclosing(segment_chunks(data, self.read_bytes)) as chunks:
            async for file, position, piece in chunks:
                yield SegmentChunk(file, position, piece)

    async def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        *,
        timeout_s: float | None = None,
    ) -> bytes | None:
        # Closed here, not by the garbage collector: a failed copy closes its file.
        async with contextlib.aclosing(self._chunks(data)) as chunks:
            copy = self.store.copy_log_segment_data(metadata, chunks)
            return await _within(timeout_s, f"copy of {metadata.remote_log_segment_id}", copy)

    async def delete_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> None:
        delete = self.store.delete_log_segment_data(metadata)
        await _within(timeout_s, f"delete of {metadata.remote_log_segment_id}", delete)

    async def close(self) -> None:
        await self.store.close()


async def _within(timeout_s: float | None, what: str, call: Awaitable[T]) -> T:
    """`call` under the caller's deadline, as the service's gRPC deadline bounds it:
    the backend's retries stop at it, and a call still running then is cancelled."""
    try:
        with deadline_after(timeout_s):
            async with asyncio.timeout(timeout_s):
                return await call
    except TimeoutError:
        raise DeadlineExceededError(f"{what} took over {timeout_s} s") from None
