"""KIP-405's value types, named and shaped as in Kafka's storage API.

Instances validate themselves on construction and raise InvalidArgumentError
naming the field, so bad input is refused at the edge whether it arrives as a
proto, a metadata-topic record or a Python call.
"""

from __future__ import annotations

import base64
import enum
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from remotelog.core.errors import CustomMetadataSizeLimitExceededError, InvalidArgumentError
from remotelog.core.states import RemoteLogSegmentState, RemotePartitionDeleteState

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# Kafka's Topic.validate: legal characters and maximum length.
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_NAME_MAX_LENGTH = 249


def validate_topic_name(topic: str, field_name: str = "topic") -> None:
    """Kafka's topic-name rules; these also keep a name from escaping a key space."""
    if not topic:
        raise InvalidArgumentError(field_name, "topic name is empty")
    if topic in (".", ".."):
        raise InvalidArgumentError(field_name, f"topic name cannot be {topic!r}")
    if len(topic) > TOPIC_NAME_MAX_LENGTH:
        raise InvalidArgumentError(
            field_name, f"topic name is longer than {TOPIC_NAME_MAX_LENGTH} characters"
        )
    if not _TOPIC_NAME.fullmatch(topic):
        raise InvalidArgumentError(
            field_name,
            f"topic name {topic!r} has characters other than ASCII alphanumerics, '.', '_', '-'",
        )


def _check_range(field_name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(field_name, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(field_name, f"{value} is outside [{low}, {high}]")


def kafka_uuid_str(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def parse_kafka_uuid(text: str, field_name: str = "uuid") -> uuid.UUID:
    """Accepts Kafka's base64 form (22 characters) or the canonical hex form."""
    try:
        if len(text) == 22:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        return uuid.UUID(text)
    except ValueError:
        raise InvalidArgumentError(field_name, f"{text!r} is not a Kafka Uuid") from None


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A topic partition together with its topic id (Kafka's TopicIdPartition)."""

    topic_id: uuid.UUID
    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        _check_range("partition", self.partition, 0, INT32_MAX)

    def __str__(self) -> str:
        return f"{kafka_uuid_str(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """One remote copy of a segment (Kafka's RemoteLogSegmentId)."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID

    def __str__(self) -> str:
        return f"{self.topic_id_partition}:{kafka_uuid_str(self.id)}"


def check_custom_metadata_size(custom_metadata: bytes | None, max_bytes: int) -> None:
    """KIP-917: custom metadata larger than `max_bytes` is refused."""
    if custom_metadata is not None and len(custom_metadata) > max_bytes:
        raise CustomMetadataSizeLimitExceededError(
            "custom_metadata",
            f"{len(custom_metadata)} bytes exceed the maximum of {max_bytes}",
            metadata={"size": str(len(custom_metadata)), "max": str(max_bytes)},
        )


def _leader_epochs(
    epochs: Mapping[int, int] | Iterable[tuple[int, int]],
) -> tuple[tuple[int, int], ...]:
    pairs = sorted(epochs.items() if isinstance(epochs, Mapping) else epochs)
    if not pairs:
        raise InvalidArgumentError("segment_leader_epochs", "must not be empty")
    seen: set[int] = set()
    for epoch, offset in pairs:
        _check_range("segment_leader_epochs.leader_epoch", epoch, 0, INT32_MAX)
        _check_range("segment_leader_epochs.start_offset", offset, 0, INT64_MAX)
        if epoch in seen:
            raise InvalidArgumentError("segment_leader_epochs", f"leader epoch {epoch} repeated")
        seen.add(epoch)
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """Everything known of one remote segment (Kafka's RemoteLogSegmentMetadata).

    `segment_leader_epochs` is a tuple of (leader epoch, start offset) pairs
    ascending by epoch; pass a dict or pairs, it is normalised.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_index_empty: bool = False

    def __post_init__(self) -> None:
        _check_range("start_offset", self.start_offset, 0, INT64_MAX)
        _check_range("end_offset", self.end_offset, self.start_offset, INT64_MAX)
        _check_range("max_timestamp_ms", self.max_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_range("broker_id", self.broker_id, -(2**31), INT32_MAX)
        _check_range("event_timestamp_ms", self.event_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_range("segment_size_in_bytes", self.segment_size_in_bytes, 0, INT32_MAX)
        object.__setattr__(
            self, "segment_leader_epochs", _leader_epochs(self.segment_leader_epochs)
        )
        if not isinstance(self.state, RemoteLogSegmentState):
            raise InvalidArgumentError("state", f"{self.state!r} is not a RemoteLogSegmentState")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    @property
    def leader_epochs(self) -> dict[int, int]:
        return dict(self.segment_leader_epochs)

    def create_with_updates(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """Kafka's createWithUpdates: state, event time, broker, custom metadata from `update`."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise InvalidArgumentError(
                "remote_log_segment_id",
                f"update of {update.remote_log_segment_id} for {self.remote_log_segment_id}",
            )
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=self.remote_log_segment_id,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
            segment_leader_epochs=self.segment_leader_epochs,
            custom_metadata=update.custom_metadata,
            state=update.state,
            txn_index_empty=self.txn_index_empty,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of a segment (Kafka's RemoteLogSegmentMetadataUpdate)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    def __post_init__(self) -> None:
        _check_range("event_timestamp_ms", self.event_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_range("broker_id", self.broker_id, -(2**31), INT32_MAX)
        if not isinstance(self.state, RemoteLogSegmentState):
            raise InvalidArgumentError("state", f"{self.state!r} is not a RemoteLogSegmentState")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionSummary:
    """A user partition with COPY_SEGMENT_FINISHED segments: what a reader of the remote
    tier plans from (not part of Kafka's RLMM, which is asked about known partitions)."""

    topic_id_partition: TopicIdPartition
    # Start offset of its first finished segment, end offset of its last (inclusive).
    earliest_offset: int
    latest_tiered_offset: int
    # Bytes and count of its finished segments.
    remote_bytes: int
    segment_count: int


@dataclass(frozen=True, slots=True)
class RecoveredSegments:
    """What recovering one partition's segments did (not part of Kafka's RLMM)."""

    # Not known to the metadata manager, now written (in a dry run, to be written).
    written: tuple[RemoteLogSegmentId, ...] = ()
    # Known only as COPY_SEGMENT_STARTED, their copy complete in the store: now (in a
    # dry run, to be) COPY_SEGMENT_FINISHED.
    completed: tuple[RemoteLogSegmentId, ...] = ()


@dataclass(frozen=True, slots=True)
class StoredChunks:
    """How a segment's log is stored as chunks (manifest version 2): `chunk_size`
    original bytes each (the last shorter), the stored size of each in order, and the
    segment's data key, unwrapped (None: not encrypted). The key is a credential: it
    goes only over TLS, and is never printed."""

    chunk_size: int
    stored_sizes: tuple[int, ...]
    data_key: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class SignedLog:
    """A URL of a segment's log to read with ranged GETs, how long it lasts, and how the
    log is stored where it is stored as chunks (the URL reads those)."""

    url: str
    valid_for_s: float
    chunks: StoredChunks | None = None


@dataclass(frozen=True, slots=True)
class SegmentByteRange:
    """Where one segment's share of an offset range lies in its log: bytes
    `start_position` up to `end_position` (exclusive, batch boundaries) of its original
    log, read by `url`, a presigned GET that lasts `valid_for_s` (of the stored chunks,
    where `chunks` says how). A reader reads them itself."""

    segment: RemoteLogSegmentMetadata
    url: str
    valid_for_s: float
    start_position: int
    end_position: int
    chunks: StoredChunks | None = None


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """A state change of a partition deletion (Kafka's RemotePartitionDeleteMetadata)."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int

    def __post_init__(self) -> None:
        if not isinstance(self.state, RemotePartitionDeleteState):
            raise InvalidArgumentError(
                "state", f"{self.state!r} is not a RemotePartitionDeleteState"
            )
        _check_range("event_timestamp_ms", self.event_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_range("broker_id", self.broker_id, -(2**31), INT32_MAX)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """A segment as kept in Kafka's RLMM snapshot file: the partition is implied by the file."""

    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    txn_index_empty: bool = False

    def __post_init__(self) -> None:
        _check_range("start_offset", self.start_offset, 0, INT64_MAX)
        _check_range("end_offset", self.end_offset, self.start_offset, INT64_MAX)
        _check_range("segment_size_in_bytes", self.segment_size_in_bytes, 0, INT32_MAX)
        object.__setattr__(
            self, "segment_leader_epochs", _leader_epochs(self.segment_leader_epochs)
        )

    @classmethod
    def create(cls, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        return cls(
            segment_id=metadata.remote_log_segment_id.id,
            start_offset=metadata.start_offset,
            end_offset=metadata.end_offset,
            max_timestamp_ms=metadata.max_timestamp_ms,
            broker_id=metadata.broker_id,
            event_timestamp_ms=metadata.event_timestamp_ms,
            segment_size_in_bytes=metadata.segment_size_in_bytes,
            segment_leader_epochs=metadata.segment_leader_epochs,
            custom_metadata=metadata.custom_metadata,
            state=metadata.state,
            txn_index_empty=metadata.txn_index_empty,
        )


RemoteLogMetadata = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogSegmentMetadataSnapshot
)


def last_fetch_position(metadata: RemoteLogSegmentMetadata, start: int, end: int | None) -> int:
    """The last byte of a fetch of `start`..`end` of the segment's log (None or past the
    end = to the end); a range no fetch can have is InvalidArgumentError naming the field."""
    size = metadata.segment_size_in_bytes
    if start < 0:
        raise InvalidArgumentError("start_position", f"{start} is negative")
    if end is not None and end < start:
        raise InvalidArgumentError("end_position", f"{end} is below start_position {start}")
    if start >= size:
        raise InvalidArgumentError(
            "start_position", f"{start} is past the end of the {size}-byte segment"
        )
    return size - 1 if end is None else min(end, size - 1)


class SegmentFile(enum.Enum):
    """The files of a copied segment; `.value` is the name used in the store's manifest."""

    LOG = "log"
    OFFSET_INDEX = "offset"
    TIME_INDEX = "timestamp"
    TRANSACTION_INDEX = "transaction"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    LEADER_EPOCH_CHECKPOINT = "leader_epoch"


class IndexType(enum.IntEnum):
    """Kafka's RemoteStorageManager.IndexType; the values are the wire enum's."""

    OFFSET = 1
    TIMESTAMP = 2
    PRODUCER_SNAPSHOT = 3
    TRANSACTION = 4
    LEADER_EPOCH = 5

    @property
    def segment_file(self) -> SegmentFile:
        return _INDEX_SEGMENT_FILES[self]

    @classmethod
    def of_file(cls, file: SegmentFile) -> IndexType:
        """The index type a segment file is served as (ValueError for the log)."""
        for index_type, its_file in _INDEX_SEGMENT_FILES.items():
            if its_file is file:
                return index_type
        raise ValueError(f"{file.value} is no index")


_INDEX_SEGMENT_FILES = {
    IndexType.OFFSET: SegmentFile.OFFSET_INDEX,
    IndexType.TIMESTAMP: SegmentFile.TIME_INDEX,
    IndexType.PRODUCER_SNAPSHOT: SegmentFile.PRODUCER_SNAPSHOT,
    IndexType.TRANSACTION: SegmentFile.TRANSACTION_INDEX,
    IndexType.LEADER_EPOCH: SegmentFile.LEADER_EPOCH_CHECKPOINT,
}


@dataclass(frozen=True)
class LogSegmentData:
    """The files of one segment to copy (Kafka's LogSegmentData).

    Each is a path to stream from disk or the bytes themselves (Kafka hands the
    leader-epoch checkpoint over as a buffer). The transaction index is optional.
    """

    log_segment: Path | bytes
    offset_index: Path | bytes
    time_index: Path | bytes
    producer_snapshot_index: Path | bytes
    leader_epoch_index: Path | bytes
    transaction_index: Path | bytes | None = None

    def files(self) -> list[tuple[SegmentFile, Path | bytes]]:
        """The files present, in the order they are sent: the log first."""
        listed: list[tuple[SegmentFile, Path | bytes | None]] = [
            (SegmentFile.LOG, self.log_segment),
            (SegmentFile.OFFSET_INDEX, self.offset_index),
            (SegmentFile.TIME_INDEX, self.time_index),
            (SegmentFile.PRODUCER_SNAPSHOT, self.producer_snapshot_index),
            (SegmentFile.LEADER_EPOCH_CHECKPOINT, self.leader_epoch_index),
            (SegmentFile.TRANSACTION_INDEX, self.transaction_index),
        ]
        return [(kind, source) for kind, source in listed if source is not None]


__all__ = [
    "IndexType",
    "LogSegmentData",
    "RemoteLogMetadata",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataSnapshot",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "SegmentFile",
    "TopicIdPartition",
    "check_custom_metadata_size",
    "kafka_uuid_str",
    "last_fetch_position",
    "parse_kafka_uuid",
    "validate_topic_name",
]
