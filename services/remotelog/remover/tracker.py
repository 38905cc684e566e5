"""What the metadata topic says about partition deletions, from the removers' committed offsets on.

The tracker reads every metadata-topic partition from the offset the removers
last committed and keeps, per user partition, the deletion events it saw.
Pending = marked or started and not finished. A remover commits `safe_offset`:
below the first marker still pending, so everything under a committed offset
is finished and a restart (or another remover) never loses a marker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from remotelog.core.model import RemoteLogMetadata, RemotePartitionDeleteMetadata, TopicIdPartition
from remotelog.core.partitioner import metadata_partition
from remotelog.core.states import RemotePartitionDeleteState

MARKED = RemotePartitionDeleteState.DELETE_PARTITION_MARKED
FINISHED = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED


@dataclass
class DeletionStatus:
    """One user partition's deletion, as far as this instance knows."""

    topic_id_partition: TopicIdPartition
    metadata_partition: int
    state: RemotePartitionDeleteState
    # Offset of the first marker seen in the metadata partition: progress may not pass it.
    marker_offset: int
    event_timestamp_ms: int
    # Filled in by status queries, from the metadata manager.
    segments_remaining: int = 0
    last_error_reason: str = ""
    last_error_message: str = ""

    @property
    def pending(self) -> bool:
        return self.state is not FINISHED


class DeletionTracker:
    def __init__(self, num_metadata_partitions: int) -> None:
        self.num_metadata_partitions = num_metadata_partitions
        # Next offset to read per metadata partition (everything below is seen).
        self.positions: dict[int, int] = {}
        self._statuses: dict[TopicIdPartition, DeletionStatus] = {}

    def metadata_partition_of(self, tip: TopicIdPartition) -> int:
        return metadata_partition(tip, self.num_metadata_partitions)

    def start(self, metadata_part: int, offset: int) -> None:
        self.positions[metadata_part] = offset

    def apply(self, metadata_part: int, offset: int, event: RemoteLogMetadata | None) -> bool:
        """Take in the record at `offset`; True when it made a partition newly pending."""
        self.positions[metadata_part] = max(self.positions.get(metadata_part, 0), offset + 1)
        if not isinstance(event, RemotePartitionDeleteMetadata):
            return False
        tip = event.topic_id_partition
        current = self._statuses.get(tip)
        if current is None:
            self._statuses[tip] = DeletionStatus(
                tip, metadata_part, event.state, offset, event.event_timestamp_ms
            )
            return event.state is not FINISHED
        if current.state is FINISHED:
            return False  # a late duplicate marker: topic ids are never reused
        if event.state is FINISHED:
            self.finished(tip, event.event_timestamp_ms)
        elif event.state is not MARKED:  # a duplicate marker does not move a deletion back
            current.state = event.state
            current.event_timestamp_ms = event.event_timestamp_ms
        return False

    def reached(self, metadata_part: int, end_offset: int) -> None:
        """The consumer reached the end of the partition at `end_offset`."""
        self.positions[metadata_part] = max(self.positions.get(metadata_part, 0), end_offset)

    def finished(self, tip: TopicIdPartition, timestamp_ms: int) -> None:
        """This instance saw the deletion finish (its own event may not be consumed yet)."""
        status = self._statuses.get(tip)
        if status is not None:
            status.state = FINISHED
            status.event_timestamp_ms = timestamp_ms
            status.last_error_reason = status.last_error_message = ""

    def status(self, tip: TopicIdPartition) -> DeletionStatus | None:
        return self._statuses.get(tip)

    def pending(self, metadata_part: int | None = None) -> list[DeletionStatus]:
        """Unfinished deletions (of one metadata partition), oldest marker first."""
        found: Iterable[DeletionStatus] = (
            s
            for s in self._statuses.values()
            if s.pending and (metadata_part is None or s.metadata_partition == metadata_part)
        )
        return sorted(found, key=lambda s: (s.metadata_partition, s.marker_offset))

    def safe_offset(self, metadata_part: int) -> int:
        """The offset a remover may commit: before the first pending marker, else the position."""
        pending = self.pending(metadata_part)
        position = self.positions.get(metadata_part, 0)
        return min([position, *(s.marker_offset for s in pending)])
