"""Reading segments straight from the storage backend, as Kafka's broker calls its RSM in-process.

With `remote.fetch.direct.storage.read.enabled` the fetch service opens the
same backend the segment store writes (the `storage.*` settings, read-only
use) and skips one gRPC hop per read: half the copies of every byte on the
read path. Writes and deletes still go through the segment store service only.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from remotelog.core.deadline import deadline_after, stream_within
from remotelog.core.errors import UnsupportedOperationError
from remotelog.core.model import IndexType, RemoteLogSegmentMetadata, SignedLog, StoredChunks
from remotelog.segmentstore.store import SegmentStore


class DirectSegmentReader:
    """The SegmentReader port over an in-process SegmentStore."""

    def __init__(self, store: SegmentStore) -> None:
        self.store = store

    async def fetch_log_segment_views(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[bytes | memoryview, None]:
        chunks = self.store.fetch_log_segment(metadata, start_position, end_position)
        async with contextlib.aclosing(stream_within(timeout_s, chunks)) as within:
            async for chunk in within:
                yield chunk

    async def open_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        *,
        timeout_s: float | None = None,
    ) -> tuple[int, int] | None:
        try:
            with deadline_after(timeout_s):
                return await self.store.open_log_segment(metadata, start_position, None)
        except UnsupportedOperationError:  # objects that are not local files (S3)
            return None

    async def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[bytes, None]:
        views = self.fetch_log_segment_views(
            metadata, start_position, end_position, timeout_s=timeout_s
        )
        async with contextlib.aclosing(views):
            async for chunk in views:
                # A view of the store's mapped pages, copied out for a caller that keeps it.
                yield chunk if type(chunk) is bytes else bytes(chunk)

    async def fetch_index(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_type: IndexType,
        *,
        timeout_s: float | None = None,
    ) -> bytes:
        with deadline_after(timeout_s):
            chunks = [
                chunk async for chunk in self.store.fetch_index(metadata, index_type.segment_file)
            ]
        return b"".join(chunks)

    async def get_log_segment_url(
        self,
        metadata: RemoteLogSegmentMetadata,
        *,
        chunks_accepted: bool = False,
        timeout_s: float | None = None,
    ) -> SignedLog:
        with deadline_after(timeout_s):
            urls = await self.store.log_segment_url(metadata, chunks_accepted)
        chunks = None
        if urls.chunks is not None:
            log = urls.chunks.log
            chunks = StoredChunks(log.chunk_size, log.stored_sizes, urls.chunks.data_key)
        return SignedLog(urls.log, urls.valid_for_s, chunks)

    async def close(self) -> None:
        await self.store.close()
