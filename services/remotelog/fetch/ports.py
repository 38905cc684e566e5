"""What the remote read path needs of the segment store and the metadata manager.

SegmentStoreClient and MetadataClient implement these; the read path never
imports gRPC, so it runs the same over the services or over in-process fakes.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator
from typing import Protocol

from remotelog.core.model import RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.remote_delete import SegmentLister


class IndexType(enum.IntEnum):
    """The segment store's IndexType values (remotelog.api.segmentstore.v1.IndexType)."""

    OFFSET = 1
    TIMESTAMP = 2
    TRANSACTION = 4


class SegmentReader(Protocol):
    def fetch_log_segment_views(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """The log's bytes; a chunk may be a view of the message it came in (no copy)."""
        ...

    async def open_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        *,
        timeout_s: float | None = None,
    ) -> tuple[int, int] | None:
        """(a descriptor of the stored log file, the caller's to close; its size) where the
        reader can lend one (a store on this host); None: read by fetch_log_segment_views."""
        ...

    async def fetch_index(
        self, metadata: RemoteLogSegmentMetadata, index_type: int, *, timeout_s: float | None = None
    ) -> bytes: ...


class SegmentLookup(SegmentLister, Protocol):
    async def remote_log_segment_metadata(
        self,
        partition: TopicIdPartition,
        leader_epoch: int,
        offset: int,
        *,
        timeout_s: float | None = None,
    ) -> RemoteLogSegmentMetadata | None: ...

    async def next_segment_with_txn_index(
        self,
        partition: TopicIdPartition,
        leader_epoch: int,
        offset: int,
        *,
        timeout_s: float | None = None,
    ) -> RemoteLogSegmentMetadata | None: ...
