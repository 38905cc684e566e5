"""What the scheduler knows about one assigned partition, and what its tasks share."""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from remotelog.core.errors import RemoteLogError
from remotelog.core.metrics import COPY, Instruments
from remotelog.core.model import RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.ports import RemoteLogMetadataManager, SegmentDataCopier
from remotelog.core.quota import ByteRateQuota
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.local_log import LocalLog, LocalSegment, largest_timestamp
from remotelog.scheduler.metrics import SCOPE


class Role(enum.Enum):
    LEADER = 1
    FOLLOWER = 2


@dataclass(frozen=True)
class Assignment:
    """A partition this broker leads or follows (OnPartitionLeadershipChanges)."""

    topic_id_partition: TopicIdPartition
    log_dir: Path
    leader_epoch: int
    role: Role
    retention_ms: int | None = None
    retention_bytes: int | None = None
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None


@dataclass(frozen=True)
class Retention:
    """Topic retention resolved against the scheduler's defaults (-2 = use retention.*)."""

    retention_ms: int
    retention_bytes: int
    local_retention_ms: int
    local_retention_bytes: int

    @classmethod
    def of(cls, assignment: Assignment, config: CopySchedulerConfig) -> Retention:
        def pick(value: int | None, default: int) -> int:
            return default if value is None else value

        retention_ms = pick(assignment.retention_ms, config.retention_ms)
        retention_bytes = pick(assignment.retention_bytes, config.retention_bytes)
        local_ms = pick(assignment.local_retention_ms, config.local_retention_ms)
        local_bytes = pick(assignment.local_retention_bytes, config.local_retention_bytes)
        return cls(
            retention_ms,
            retention_bytes,
            retention_ms if local_ms == -2 else local_ms,
            retention_bytes if local_bytes == -2 else local_bytes,
        )


class StaleLeaderError(RemoteLogError):
    """This broker no longer leads the partition at the assigned epoch: its run writes nothing."""

    reason = "FENCED_LEADER_EPOCH"
    code = "FAILED_PRECONDITION"


@dataclass
class PartitionRuntime:
    """Mutable per-partition state kept between runs (Kafka keeps it in the RLMTask)."""

    assignment: Assignment
    # Highest offset known to be tiered (inclusive), -1 when none.
    highest_tiered_offset: int = -1
    # Fencing token of the copy lease under which highest_tiered_offset was
    # last known right; a gap means another instance ran in between.
    copy_token: int | None = None
    # The whole log's start (remote included); None until found on becoming leader.
    log_start_offset: int | None = None
    # The highest start recorded by UpdateLogStartOffset (DeleteRecords).
    requested_log_start_offset: int = 0
    local_log_start_offset: int = 0
    copy_lag_bytes: int = 0
    copy_lag_segments: int = 0
    # Largest record timestamp of the oldest rolled segment not yet copied (copy_lag_ms).
    oldest_pending_timestamp: int | None = None
    segments_deleted_before_tiering: int = 0
    remote_log_size_bytes: int = 0
    remote_log_size_computation_ms: float = 0.0
    remote_log_metadata_count: int = 0
    delete_lag_bytes: int = 0
    delete_lag_segments: int = 0
    last_error: RemoteLogError | None = None
    # Set when the store returned custom metadata over the cap: copying stops.
    copy_disabled: RemoteLogError | None = None
    segments_being_copied: set[uuid.UUID] = field(default_factory=set)
    # The remote segments as last listed, for expiration runs that find nothing
    # to delete (most of them): None when they must be listed again.
    remote_segments: list[RemoteLogSegmentMetadata] | None = None
    remote_segments_uses: int = 0
    remote_segments_generation: int = 0
    # (base offset, size) -> largest timestamp, so local retention reads a segment once.
    timestamps: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def tip(self) -> TopicIdPartition:
        return self.assignment.topic_id_partition

    @property
    def directory(self) -> Path:
        return self.assignment.log_dir

    def remote_segments_changed(self) -> None:
        """A metadata write of this partition (or an unseen one): list the segments again."""
        self.remote_segments = None
        self.remote_segments_generation += 1

    def known_largest_timestamp(self, segment: LocalSegment) -> int | None:
        """The segment's largest timestamp if it was read already (rolled segments never change)."""
        return self.timestamps.get((segment.base_offset, segment.size))

    def largest_timestamp(self, segment: LocalSegment) -> int:
        key = (segment.base_offset, segment.size)
        if key not in self.timestamps:
            self.timestamps[key] = largest_timestamp(segment)
        return self.timestamps[key]

    def update_lag(self, log: LocalLog) -> None:
        """Copy lag as Kafka reports it: rolled segments above the highest tiered offset."""
        pending = [s for s in log.rolled if s.end_offset > self.highest_tiered_offset]
        self.copy_lag_bytes = sum(s.size for s in pending)
        self.copy_lag_segments = len(pending)
        self.local_log_start_offset = log.local_log_start_offset


@dataclass
class TaskContext:
    """Everything a task run needs besides its partition."""

    config: CopySchedulerConfig
    store: SegmentDataCopier
    metadata: RemoteLogMetadataManager
    quota: ByteRateQuota
    clock: Callable[[], float] = time.time
    metrics: Instruments = field(default_factory=lambda: Instruments(SCOPE, COPY))

    @property
    def timeout_s(self) -> float:
        return self.config.rpc_timeout_ms / 1000

    def now_ms(self) -> int:
        return int(self.clock() * 1000)
