"""Proto <-> domain conversion for the shared types of remotelog.api.type.v1.

Imports only protobuf messages, never grpc. Every `*_from_proto` validates and
raises InvalidArgumentError whose `field` is the full path inside the request
(e.g. `remote_log_segment_metadata.remote_log_segment_id.topic_id_partition.topic`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import cast

from remotelog.api.fetch.v1 import remote_fetch_pb2 as fetch_pb
from remotelog.api.metadata.v1 import metadata_pb2 as metadata_pb
from remotelog.api.segmentstore.v1 import segment_store_pb2 as store_pb
from remotelog.api.type.v1 import error_pb2
from remotelog.api.type.v1 import segment_pb2 as pb
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import (
    IndexType,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionSummary,
    SegmentByteRange,
    SegmentFile,
    StoredChunks,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState, RemotePartitionDeleteState

# Proto enum values are Kafka's byte ids + 1: proto3 reserves 0 for UNSPECIFIED.
# The names match after the enum's prefix, so the tables are derived, not typed.
_SEGMENT_STATE_TO_PROTO = {
    state: cast(
        pb.RemoteLogSegmentState,
        pb.RemoteLogSegmentState.Value(f"REMOTE_LOG_SEGMENT_STATE_{state.name}"),
    )
    for state in RemoteLogSegmentState
}
_SEGMENT_STATE_FROM_PROTO: dict[int, RemoteLogSegmentState] = {
    v: k for k, v in _SEGMENT_STATE_TO_PROTO.items()
}
_DELETE_STATE_TO_PROTO = {
    state: cast(
        pb.RemotePartitionDeleteState,
        pb.RemotePartitionDeleteState.Value(f"REMOTE_PARTITION_DELETE_STATE_{state.name}"),
    )
    for state in RemotePartitionDeleteState
}
_DELETE_STATE_FROM_PROTO: dict[int, RemotePartitionDeleteState] = {
    v: k for k, v in _DELETE_STATE_TO_PROTO.items()
}
_SEGMENT_FILE_TO_PROTO = {
    file: cast(store_pb.SegmentFile, store_pb.SegmentFile.Value(f"SEGMENT_FILE_{file.name}"))
    for file in SegmentFile
}
_SEGMENT_FILE_FROM_PROTO: dict[int, SegmentFile] = {v: k for k, v in _SEGMENT_FILE_TO_PROTO.items()}


@contextmanager
def field_path(prefix: str) -> Iterator[None]:
    """Prefix the field named by an InvalidArgumentError raised inside with `prefix`."""
    try:
        yield
    except InvalidArgumentError as exc:
        raise exc.at(prefix) from None


def require(msg: object, name: str, field: str) -> None:
    """Refuse a request whose message field `name` is unset (proto3 has no `required`)."""
    has_field = getattr(msg, "HasField")  # noqa: B009 - protobuf messages only
    if not has_field(name):
        raise InvalidArgumentError(field, "is required")


def uuid_from_bytes(raw: bytes, field: str) -> uuid.UUID:
    if len(raw) != 16:
        raise InvalidArgumentError(field, f"must be 16 bytes, got {len(raw)}")
    return uuid.UUID(bytes=raw)


def segment_state_from_proto(value: int, field: str = "state") -> RemoteLogSegmentState:
    try:
        return _SEGMENT_STATE_FROM_PROTO[value]
    except KeyError:
        raise InvalidArgumentError(field, f"{value} is not a valid RemoteLogSegmentState") from None


def segment_state_to_proto(state: RemoteLogSegmentState) -> pb.RemoteLogSegmentState:
    return _SEGMENT_STATE_TO_PROTO[state]


def partition_delete_state_from_proto(
    value: int, field: str = "state"
) -> RemotePartitionDeleteState:
    try:
        return _DELETE_STATE_FROM_PROTO[value]
    except KeyError:
        raise InvalidArgumentError(
            field, f"{value} is not a valid RemotePartitionDeleteState"
        ) from None


def partition_delete_state_to_proto(
    state: RemotePartitionDeleteState,
) -> pb.RemotePartitionDeleteState:
    return _DELETE_STATE_TO_PROTO[state]


def topic_id_partition_from_proto(
    msg: pb.TopicIdPartition, field: str = "topic_id_partition"
) -> TopicIdPartition:
    with field_path(field):
        return TopicIdPartition(uuid_from_bytes(msg.topic_id, "topic_id"), msg.topic, msg.partition)


def topic_id_partition_to_proto(tip: TopicIdPartition) -> pb.TopicIdPartition:
    return pb.TopicIdPartition(
        topic_id=tip.topic_id.bytes, topic=tip.topic, partition=tip.partition
    )


def remote_partition_to_proto(summary: RemotePartitionSummary) -> metadata_pb.RemotePartition:
    return metadata_pb.RemotePartition(
        topic_id_partition=topic_id_partition_to_proto(summary.topic_id_partition),
        earliest_offset=summary.earliest_offset,
        latest_tiered_offset=summary.latest_tiered_offset,
        remote_bytes=summary.remote_bytes,
        segment_count=summary.segment_count,
    )


def remote_partition_from_proto(msg: metadata_pb.RemotePartition) -> RemotePartitionSummary:
    return RemotePartitionSummary(
        topic_id_partition_from_proto(msg.topic_id_partition),
        earliest_offset=msg.earliest_offset,
        latest_tiered_offset=msg.latest_tiered_offset,
        remote_bytes=msg.remote_bytes,
        segment_count=msg.segment_count,
    )


def segment_id_from_proto(
    msg: pb.RemoteLogSegmentId, field: str = "remote_log_segment_id"
) -> RemoteLogSegmentId:
    require(msg, "topic_id_partition", f"{field}.topic_id_partition")
    tip = topic_id_partition_from_proto(msg.topic_id_partition, f"{field}.topic_id_partition")
    return RemoteLogSegmentId(tip, uuid_from_bytes(msg.id, f"{field}.id"))


def segment_id_to_proto(segment_id: RemoteLogSegmentId) -> pb.RemoteLogSegmentId:
    return pb.RemoteLogSegmentId(
        topic_id_partition=topic_id_partition_to_proto(segment_id.topic_id_partition),
        id=segment_id.id.bytes,
    )


def segment_metadata_from_proto(
    msg: pb.RemoteLogSegmentMetadata, field: str = "remote_log_segment_metadata"
) -> RemoteLogSegmentMetadata:
    require(msg, "remote_log_segment_id", f"{field}.remote_log_segment_id")
    segment_id = segment_id_from_proto(msg.remote_log_segment_id, f"{field}.remote_log_segment_id")
    state = segment_state_from_proto(msg.state, f"{field}.state")
    with field_path(field):
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=segment_id,
            start_offset=msg.start_offset,
            end_offset=msg.end_offset,
            max_timestamp_ms=msg.max_timestamp_ms,
            broker_id=msg.broker_id,
            event_timestamp_ms=msg.event_timestamp_ms,
            segment_size_in_bytes=msg.segment_size_in_bytes,
            segment_leader_epochs=tuple(
                (e.leader_epoch, e.start_offset) for e in msg.segment_leader_epochs
            ),
            custom_metadata=msg.custom_metadata if msg.HasField("custom_metadata") else None,
            state=state,
            txn_index_empty=msg.txn_index_empty,
        )


def segment_metadata_to_proto(metadata: RemoteLogSegmentMetadata) -> pb.RemoteLogSegmentMetadata:
    return pb.RemoteLogSegmentMetadata(
        remote_log_segment_id=segment_id_to_proto(metadata.remote_log_segment_id),
        start_offset=metadata.start_offset,
        end_offset=metadata.end_offset,
        max_timestamp_ms=metadata.max_timestamp_ms,
        broker_id=metadata.broker_id,
        event_timestamp_ms=metadata.event_timestamp_ms,
        segment_size_in_bytes=metadata.segment_size_in_bytes,
        segment_leader_epochs=[
            pb.SegmentLeaderEpoch(leader_epoch=epoch, start_offset=offset)
            for epoch, offset in metadata.segment_leader_epochs
        ],
        custom_metadata=metadata.custom_metadata,
        state=segment_state_to_proto(metadata.state),
        txn_index_empty=metadata.txn_index_empty,
    )


def segment_update_from_proto(
    msg: pb.RemoteLogSegmentMetadataUpdate, field: str = "remote_log_segment_metadata_update"
) -> RemoteLogSegmentMetadataUpdate:
    require(msg, "remote_log_segment_id", f"{field}.remote_log_segment_id")
    segment_id = segment_id_from_proto(msg.remote_log_segment_id, f"{field}.remote_log_segment_id")
    state = segment_state_from_proto(msg.state, f"{field}.state")
    with field_path(field):
        return RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=segment_id,
            event_timestamp_ms=msg.event_timestamp_ms,
            custom_metadata=msg.custom_metadata if msg.HasField("custom_metadata") else None,
            state=state,
            broker_id=msg.broker_id,
        )


def segment_update_to_proto(
    update: RemoteLogSegmentMetadataUpdate,
) -> pb.RemoteLogSegmentMetadataUpdate:
    return pb.RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=segment_id_to_proto(update.remote_log_segment_id),
        event_timestamp_ms=update.event_timestamp_ms,
        custom_metadata=update.custom_metadata,
        state=segment_state_to_proto(update.state),
        broker_id=update.broker_id,
    )


def partition_delete_from_proto(
    msg: pb.RemotePartitionDeleteMetadata, field: str = "remote_partition_delete_metadata"
) -> RemotePartitionDeleteMetadata:
    require(msg, "topic_id_partition", f"{field}.topic_id_partition")
    tip = topic_id_partition_from_proto(msg.topic_id_partition, f"{field}.topic_id_partition")
    state = partition_delete_state_from_proto(msg.state, f"{field}.state")
    with field_path(field):
        return RemotePartitionDeleteMetadata(
            topic_id_partition=tip,
            state=state,
            event_timestamp_ms=msg.event_timestamp_ms,
            broker_id=msg.broker_id,
        )


def partition_delete_to_proto(
    metadata: RemotePartitionDeleteMetadata,
) -> pb.RemotePartitionDeleteMetadata:
    return pb.RemotePartitionDeleteMetadata(
        topic_id_partition=topic_id_partition_to_proto(metadata.topic_id_partition),
        state=partition_delete_state_to_proto(metadata.state),
        event_timestamp_ms=metadata.event_timestamp_ms,
        broker_id=metadata.broker_id,
    )


def byte_range_to_proto(located: SegmentByteRange) -> fetch_pb.SegmentByteRange:
    chunks = located.chunks
    return fetch_pb.SegmentByteRange(
        remote_log_segment_metadata=segment_metadata_to_proto(located.segment),
        url=located.url,
        valid_for_ms=int(located.valid_for_s * 1000),
        start_position=located.start_position,
        end_position=located.end_position,
        chunks=None
        if chunks is None
        else fetch_pb.LogChunks(
            chunk_size=chunks.chunk_size,
            stored_sizes=chunks.stored_sizes,
            data_key=chunks.data_key or b"",
        ),
    )


def byte_range_from_proto(msg: fetch_pb.SegmentByteRange) -> SegmentByteRange:
    chunks = None
    if msg.HasField("chunks"):
        c = msg.chunks
        chunks = StoredChunks(c.chunk_size, tuple(c.stored_sizes), c.data_key or None)
    return SegmentByteRange(
        segment_metadata_from_proto(msg.remote_log_segment_metadata),
        msg.url,
        msg.valid_for_ms / 1000,
        msg.start_position,
        msg.end_position,
        chunks,
    )


def error_reason_to_proto(reason: str) -> error_pb2.ErrorReason:
    """A RemoteLogError's reason (e.g. "SEGMENT_NOT_FOUND") as the proto enum; "" = UNSPECIFIED."""
    if not reason:
        return error_pb2.ERROR_REASON_UNSPECIFIED
    return cast(error_pb2.ErrorReason, error_pb2.ErrorReason.Value(f"ERROR_REASON_{reason}"))


def segment_file_to_proto(file: SegmentFile) -> store_pb.SegmentFile:
    return _SEGMENT_FILE_TO_PROTO[file]


def segment_file_from_proto(value: int, field: str) -> SegmentFile:
    try:
        return _SEGMENT_FILE_FROM_PROTO[value]
    except KeyError:
        raise InvalidArgumentError(field, f"unknown segment file {value}") from None


def index_type_from_proto(value: int, field: str = "index_type") -> IndexType:
    """The proto enum's values are Kafka's IndexType's (its zero, UNSPECIFIED, is refused)."""
    try:
        return IndexType(value)
    except ValueError:
        raise InvalidArgumentError(field, f"unknown index type {value}") from None


def non_negative(value: int, field: str) -> int:
    return at_least(value, 0, field)


def at_least(value: int, minimum: int, field: str) -> int:
    """`value` when it is at least `minimum`, else INVALID_ARGUMENT naming `field`."""
    if value < minimum:
        raise InvalidArgumentError(field, f"must be >= {minimum}, got {value}")
    return value


def topic_id_partition_field(message: object, field: str = "") -> TopicIdPartition:
    """The required `topic_id_partition` of a request, or of the nested message at `field`;
    errors name the full path (`partitions[2].topic_id_partition.topic`)."""
    path = f"{field}.topic_id_partition" if field else "topic_id_partition"
    require(message, "topic_id_partition", path)
    return topic_id_partition_from_proto(message.topic_id_partition, path)  # type: ignore[attr-defined]


def topic_id_partitions_from_proto(
    messages: Iterable[pb.TopicIdPartition], field: str
) -> list[TopicIdPartition]:
    """A repeated TopicIdPartition field; errors name the element (`partitions[1].topic`)."""
    return [topic_id_partition_from_proto(m, f"{field}[{i}]") for i, m in enumerate(messages)]
