"""Kafka's RemoteLogMetadataSerde: the values of `__remote_log_metadata` records.

Frame (Kafka's AbstractApiMessageSerde): uvarint frame version (1), uvarint
apiKey, uvarint version, then the message in flexible-version encoding
(compact strings and bytes, 16-byte UUIDs, a tagged-field section closing
every struct). Message layouts follow storage/src/main/resources/message/*.json:

  apiKey 0 RemoteLogSegmentMetadataRecord        -> RemoteLogSegmentMetadata
  apiKey 1 RemoteLogSegmentMetadataUpdateRecord  -> RemoteLogSegmentMetadataUpdate
  apiKey 2 RemotePartitionDeleteMetadataRecord   -> RemotePartitionDeleteMetadata
  apiKey 3 RemoteLogSegmentMetadataSnapshotRecord -> RemoteLogSegmentMetadataSnapshot

Versions 0 and 1 are read. Version 1 only adds tagged fields (the broker's
leader epoch, an update's end offset) that remotelog does not model; they are
skipped on read, exactly as unknown tagged fields are. Writes default to
version 0, which every Kafka release with tiered storage can read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState, RemotePartitionDeleteState
from remotelog.core.wire import Reader, WireError, Writer

FRAME_VERSION = 1
SEGMENT_METADATA_API_KEY = 0
SEGMENT_METADATA_UPDATE_API_KEY = 1
PARTITION_DELETE_API_KEY = 2
SEGMENT_METADATA_SNAPSHOT_API_KEY = 3
SUPPORTED_VERSIONS = (0, 1)
# Tag of TxnIndexEmpty in RemoteLogSegmentMetadataRecord and ...SnapshotRecord.
_TXN_INDEX_EMPTY_TAG = 0


class MetadataParseError(ValueError):
    """Bytes that are not a valid metadata record (Kafka's MetadataParseException)."""


# ---------------------------------------------------------------- writing


def _write_topic_id_partition(w: Writer, tip: TopicIdPartition) -> None:
    w.compact_string(tip.topic)
    w.uuid(tip.topic_id)
    w.int32(tip.partition)
    w.tagged_fields([])


def _write_segment_id(w: Writer, segment_id: RemoteLogSegmentId) -> None:
    _write_topic_id_partition(w, segment_id.topic_id_partition)
    w.uuid(segment_id.id)
    w.tagged_fields([])


def _write_leader_epochs(w: Writer, epochs: tuple[tuple[int, int], ...]) -> None:
    w.compact_array_length(len(epochs))
    for epoch, offset in epochs:
        w.int32(epoch)
        w.int64(offset)
        w.tagged_fields([])


def _txn_index_tag(empty: bool) -> list[tuple[int, bytes]]:
    # A tagged field is written only when it differs from its default (false).
    return [(_TXN_INDEX_EMPTY_TAG, b"\x01")] if empty else []


def _write_segment_body(
    w: Writer, m: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataSnapshot
) -> None:
    """The fields RemoteLogSegmentMetadataRecord and ...SnapshotRecord share, in order."""
    w.int64(m.start_offset)
    w.int64(m.end_offset)
    w.int32(m.broker_id)
    w.int64(m.max_timestamp_ms)
    w.int64(m.event_timestamp_ms)
    _write_leader_epochs(w, m.segment_leader_epochs)
    w.int32(m.segment_size_in_bytes)
    w.compact_nullable_bytes(m.custom_metadata)
    w.int8(m.state.id)
    w.tagged_fields(_txn_index_tag(m.txn_index_empty))


def _write_segment_metadata(w: Writer, m: RemoteLogSegmentMetadata) -> None:
    _write_segment_id(w, m.remote_log_segment_id)
    _write_segment_body(w, m)


def _write_segment_update(w: Writer, u: RemoteLogSegmentMetadataUpdate) -> None:
    _write_segment_id(w, u.remote_log_segment_id)
    w.int32(u.broker_id)
    w.int64(u.event_timestamp_ms)
    w.compact_nullable_bytes(u.custom_metadata)
    w.int8(u.state.id)
    w.tagged_fields([])


def _write_partition_delete(w: Writer, d: RemotePartitionDeleteMetadata) -> None:
    _write_topic_id_partition(w, d.topic_id_partition)
    w.int32(d.broker_id)
    w.int64(d.event_timestamp_ms)
    w.int8(d.state.id)
    w.tagged_fields([])


def _write_snapshot(w: Writer, s: RemoteLogSegmentMetadataSnapshot) -> None:
    w.uuid(s.segment_id)
    _write_segment_body(w, s)


def serialize(value: RemoteLogMetadata, version: int = 0) -> bytes:
    """The record value Kafka's RemoteLogMetadataSerde.serialize writes for `value`."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported metadata record version {version}")
    w = Writer()
    w.uvarint(FRAME_VERSION)
    if isinstance(value, RemoteLogSegmentMetadata):
        w.uvarint(SEGMENT_METADATA_API_KEY)
        w.uvarint(version)
        _write_segment_metadata(w, value)
    elif isinstance(value, RemoteLogSegmentMetadataUpdate):
        w.uvarint(SEGMENT_METADATA_UPDATE_API_KEY)
        w.uvarint(version)
        _write_segment_update(w, value)
    elif isinstance(value, RemotePartitionDeleteMetadata):
        w.uvarint(PARTITION_DELETE_API_KEY)
        w.uvarint(version)
        _write_partition_delete(w, value)
    elif isinstance(value, RemoteLogSegmentMetadataSnapshot):
        w.uvarint(SEGMENT_METADATA_SNAPSHOT_API_KEY)
        w.uvarint(version)
        _write_snapshot(w, value)
    else:
        raise TypeError(f"no metadata record type for {type(value).__name__}")
    return bytes(w.buf)


# ---------------------------------------------------------------- reading


def _read_topic_id_partition(r: Reader) -> TopicIdPartition:
    name = r.compact_string("TopicIdPartition.Name")
    topic_id = r.uuid("TopicIdPartition.Id")
    partition = r.int32("TopicIdPartition.Partition")
    r.tagged_fields("TopicIdPartition")
    return TopicIdPartition(topic_id, name, partition)


def _read_segment_id(r: Reader) -> RemoteLogSegmentId:
    tip = _read_topic_id_partition(r)
    segment_id = r.uuid("RemoteLogSegmentId.Id")
    r.tagged_fields("RemoteLogSegmentId")
    return RemoteLogSegmentId(tip, segment_id)


def _read_leader_epochs(r: Reader) -> tuple[tuple[int, int], ...]:
    count = r.compact_array_length("SegmentLeaderEpochs")
    epochs = []
    for _ in range(count):
        epoch = r.int32("SegmentLeaderEpochs.LeaderEpoch")
        offset = r.int64("SegmentLeaderEpochs.Offset")
        r.tagged_fields("SegmentLeaderEpochs")
        epochs.append((epoch, offset))
    return tuple(epochs)


def _segment_state(r: Reader) -> RemoteLogSegmentState:
    state_id = r.int8("RemoteLogSegmentState")
    try:
        return RemoteLogSegmentState.for_id(state_id)
    except ValueError as exc:
        raise WireError(str(exc)) from None


def _txn_index_empty(tags: dict[int, memoryview]) -> bool:
    raw = tags.get(_TXN_INDEX_EMPTY_TAG)
    if raw is None:
        return False
    if len(raw) != 1:
        raise WireError(f"TxnIndexEmpty tag has {len(raw)} bytes, expected 1")
    return raw[0] != 0


def _read_segment_body(r: Reader, record: str) -> dict[str, Any]:
    """The fields RemoteLogSegmentMetadataRecord and ...SnapshotRecord share, by domain name."""
    body: dict[str, Any] = {
        "start_offset": r.int64("StartOffset"),
        "end_offset": r.int64("EndOffset"),
        "broker_id": r.int32("BrokerId"),
        "max_timestamp_ms": r.int64("MaxTimestampMs"),
        "event_timestamp_ms": r.int64("EventTimestampMs"),
        "segment_leader_epochs": _read_leader_epochs(r),
        "segment_size_in_bytes": r.int32("SegmentSizeInBytes"),
        "custom_metadata": r.compact_nullable_bytes("CustomMetadata"),
        "state": _segment_state(r),
    }
    body["txn_index_empty"] = _txn_index_empty(r.tagged_fields(record))
    return body


def _read_segment_metadata(r: Reader) -> RemoteLogSegmentMetadata:
    segment_id = _read_segment_id(r)
    body = _read_segment_body(r, "RemoteLogSegmentMetadataRecord")
    return RemoteLogSegmentMetadata(remote_log_segment_id=segment_id, **body)


def _read_segment_update(r: Reader) -> RemoteLogSegmentMetadataUpdate:
    segment_id = _read_segment_id(r)
    broker_id = r.int32("BrokerId")
    event_timestamp_ms = r.int64("EventTimestampMs")
    custom_metadata = r.compact_nullable_bytes("CustomMetadata")
    state = _segment_state(r)
    r.tagged_fields("RemoteLogSegmentMetadataUpdateRecord")
    return RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=segment_id,
        event_timestamp_ms=event_timestamp_ms,
        custom_metadata=custom_metadata,
        state=state,
        broker_id=broker_id,
    )


def _read_partition_delete(r: Reader) -> RemotePartitionDeleteMetadata:
    tip = _read_topic_id_partition(r)
    broker_id = r.int32("BrokerId")
    event_timestamp_ms = r.int64("EventTimestampMs")
    state_id = r.int8("RemotePartitionDeleteState")
    try:
        state = RemotePartitionDeleteState.for_id(state_id)
    except ValueError as exc:
        raise WireError(str(exc)) from None
    r.tagged_fields("RemotePartitionDeleteMetadataRecord")
    return RemotePartitionDeleteMetadata(tip, state, event_timestamp_ms, broker_id)


def _read_snapshot(r: Reader) -> RemoteLogSegmentMetadataSnapshot:
    segment_id = r.uuid("SegmentId")
    body = _read_segment_body(r, "RemoteLogSegmentMetadataSnapshotRecord")
    return RemoteLogSegmentMetadataSnapshot(segment_id=segment_id, **body)


_READERS: dict[int, Callable[[Reader], RemoteLogMetadata]] = {
    SEGMENT_METADATA_API_KEY: _read_segment_metadata,
    SEGMENT_METADATA_UPDATE_API_KEY: _read_segment_update,
    PARTITION_DELETE_API_KEY: _read_partition_delete,
    SEGMENT_METADATA_SNAPSHOT_API_KEY: _read_snapshot,
}


def _header(r: Reader) -> tuple[int, int]:
    frame_version = r.uvarint("frame version")
    if frame_version != FRAME_VERSION:
        raise MetadataParseError(
            f"unknown frame version {frame_version} (only {FRAME_VERSION} is supported)"
        )
    api_key = r.uvarint("apiKey")
    version = r.uvarint("version")
    if api_key not in _READERS:
        raise MetadataParseError(f"unknown apiKey {api_key} (known: 0-3)")
    if version not in SUPPORTED_VERSIONS:
        raise MetadataParseError(
            f"unsupported version {version} of apiKey {api_key} "
            f"(supported: {SUPPORTED_VERSIONS[0]}-{SUPPORTED_VERSIONS[-1]})"
        )
    return api_key, version


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """Kafka's RemoteLogMetadataSerde.deserialize; raises MetadataParseError on bad bytes."""
    r = Reader(data)
    try:
        api_key, _version = _header(r)
        value = _READERS[api_key](r)
    except WireError as exc:
        raise MetadataParseError(f"bad metadata record: {exc}") from None
    except InvalidArgumentError as exc:
        raise MetadataParseError(f"bad metadata record: {exc}") from None
    if r.remaining:
        raise MetadataParseError(
            f"found {r.remaining} byte(s) of garbage after apiKey {api_key} at position {r.pos}"
        )
    return value
