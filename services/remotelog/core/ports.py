"""Kafka's two role interfaces of KIP-405, as the services' domain code calls them.

`RemoteStorageManager` and `RemoteLogMetadataManager` mirror Kafka's Java
interfaces (`org.apache.kafka.server.log.remote.storage`), async, with a
per-call `timeout_s`. `SegmentStoreClient` and `MetadataClient` implement them
over gRPC; `DirectSegmentReader` and `DirectSegmentWriter` implement the parts
a service uses in-process. Each consumer asks for the narrowest part it
calls, so the domain code never imports a client or gRPC and runs the same
over the services or in-process.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Protocol

from remotelog.core.model import (
    IndexType,
    LogSegmentData,
    RecoveredSegments,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionSummary,
    SignedLog,
    TopicIdPartition,
)
from remotelog.core.states import RemotePartitionDeleteState

# --- RemoteStorageManager ---------------------------------------------------


class SegmentDataDeleter(Protocol):
    """deleteLogSegmentData: idempotent, a missing segment is no error."""

    async def delete_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> None: ...


class SegmentDataCopier(SegmentDataDeleter, Protocol):
    """copyLogSegmentData, and the delete that undoes a copy that cannot be finished."""

    async def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        *,
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Copy the segment's files; returns the store's custom metadata (KIP-917), if any."""
        ...


class SegmentReader(Protocol):
    """fetchLogSegment and fetchIndex, as the remote read path calls them."""

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
        self,
        metadata: RemoteLogSegmentMetadata,
        index_type: IndexType,
        *,
        timeout_s: float | None = None,
    ) -> bytes: ...

    async def get_log_segment_url(
        self,
        metadata: RemoteLogSegmentMetadata,
        *,
        chunks_accepted: bool = False,
        timeout_s: float | None = None,
    ) -> SignedLog:
        """A URL of the log, read with ranged GETs by whoever holds it;
        UnsupportedOperationError where the store signs none, or for a log stored as
        chunks unless the caller decodes them (`chunks_accepted`: then with its chunks)."""
        ...


class RemoteStorageManager(SegmentDataCopier, SegmentReader, Protocol):
    """Kafka's RemoteStorageManager: copy, fetch, fetch index, delete."""


# --- RemoteLogMetadataManager -----------------------------------------------


class SegmentLister(Protocol):
    """listRemoteLogSegments: all of a partition's segments, or those of one leader epoch."""

    def list_remote_log_segments(
        self,
        partition: TopicIdPartition,
        leader_epoch: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[RemoteLogSegmentMetadata, None]: ...


class SegmentStateWriter(Protocol):
    """updateRemoteLogSegmentMetadata."""

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate, *, timeout_s: float | None = None
    ) -> None: ...


class SegmentLookup(SegmentLister, Protocol):
    """The lookups of the remote read path (RemoteLogManager.read)."""

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


class RemoteLogMetadataManager(SegmentLookup, SegmentStateWriter, Protocol):
    """Kafka's RemoteLogMetadataManager (topic-based), every call a broker-side task makes."""

    async def add_remote_log_segment_metadata(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> None: ...

    async def put_remote_partition_delete_metadata(
        self, delete: RemotePartitionDeleteMetadata, *, timeout_s: float | None = None
    ) -> None: ...

    async def remote_partition_delete_state(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> RemotePartitionDeleteState | None: ...

    async def highest_offset_for_epoch(
        self, partition: TopicIdPartition, leader_epoch: int, *, timeout_s: float | None = None
    ) -> int | None: ...

    async def remote_log_size(
        self, partition: TopicIdPartition, leader_epoch: int, *, timeout_s: float | None = None
    ) -> int: ...

    async def on_partition_leadership_changes(
        self,
        leaders: Iterable[TopicIdPartition],
        followers: Iterable[TopicIdPartition] = (),
        *,
        timeout_s: float | None = None,
    ) -> None: ...

    async def on_stop_partitions(
        self, partitions: Iterable[TopicIdPartition], *, timeout_s: float | None = None
    ) -> None: ...

    async def is_ready(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> bool: ...


class RemotePartitionLister(Protocol):
    """Not Kafka's: every partition with data in the remote tier (ListRemotePartitions)."""

    async def list_remote_partitions(
        self, topic: str | None = None, *, timeout_s: float | None = None
    ) -> list[RemotePartitionSummary]: ...


class SegmentDescriber(Protocol):
    """Not Kafka's: a segment as the store's manifest describes it (DescribeLogSegment),
    what a recovery's segments are checked against before they are written."""

    async def describe_log_segment(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> tuple[RemoteLogSegmentMetadata, bytes | None]: ...


class SegmentRecoverer(Protocol):
    """Not Kafka's: a partition's segments written back from a store's manifests
    (RecoverRemoteLogSegments), the partition not ready meanwhile."""

    async def recover_remote_log_segments(
        self,
        partition: TopicIdPartition,
        segments: Sequence[RemoteLogSegmentMetadata],
        *,
        recovery: str,
        dry_run: bool = False,
        timeout_s: float | None = None,
    ) -> RecoveredSegments: ...
