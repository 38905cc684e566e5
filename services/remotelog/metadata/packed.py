"""One remote segment's metadata packed into a single `bytes` object.

The cache holds every live segment of every partition it serves, so the
per-segment cost decides how many segments fit in memory. A frozen dataclass
with its id, UUID, tuple of epoch pairs and a dozen int objects costs about
900 bytes; this packing costs about 100 (plus the 16-byte id used as the key).
Readers get ordinary RemoteLogSegmentMetadata objects, built on demand.

Layout (little-endian): start offset q, end offset q, max timestamp q, broker
id i, event timestamp q, segment size i, state B, flags B (bit 0: transaction
index empty, bit 1: custom metadata present), epoch count H, then per epoch
(leader epoch i, start offset q), then the custom metadata bytes to the end.
"""

from __future__ import annotations

import struct
import uuid

from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState

_HEADER = struct.Struct("<qqqiqiBBH")
_EPOCH = struct.Struct("<iq")
_START = struct.Struct("<q")
_STATE_AT = 40
_FLAGS_AT = 41
_TXN_INDEX_EMPTY = 1
_HAS_CUSTOM = 2
_STATES = tuple(RemoteLogSegmentState)


def pack(metadata: RemoteLogSegmentMetadata) -> bytes:
    epochs = metadata.segment_leader_epochs
    custom = metadata.custom_metadata
    flags = (_TXN_INDEX_EMPTY if metadata.txn_index_empty else 0) | (
        _HAS_CUSTOM if custom is not None else 0
    )
    parts = [
        _HEADER.pack(
            metadata.start_offset,
            metadata.end_offset,
            metadata.max_timestamp_ms,
            metadata.broker_id,
            metadata.event_timestamp_ms,
            metadata.segment_size_in_bytes,
            metadata.state.value,
            flags,
            len(epochs),
        )
    ]
    parts.extend(_EPOCH.pack(epoch, offset) for epoch, offset in epochs)
    if custom is not None:
        parts.append(custom)
    return b"".join(parts)


def unpack(
    topic_id_partition: TopicIdPartition, segment_id: bytes, packed: bytes
) -> RemoteLogSegmentMetadata:
    start, end, max_ts, broker, event_ts, size, state, flags, count = _HEADER.unpack_from(packed)
    epochs_end = _HEADER.size + count * _EPOCH.size
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(topic_id_partition, uuid.UUID(bytes=segment_id)),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=max_ts,
        broker_id=broker,
        event_timestamp_ms=event_ts,
        segment_size_in_bytes=size,
        segment_leader_epochs=tuple(_EPOCH.iter_unpack(packed[_HEADER.size : epochs_end])),
        custom_metadata=packed[epochs_end:] if flags & _HAS_CUSTOM else None,
        state=_STATES[state],
        txn_index_empty=bool(flags & _TXN_INDEX_EMPTY),
    )


def start_offset(packed: bytes) -> int:
    value: int = _START.unpack_from(packed, 0)[0]
    return value


def end_offset(packed: bytes) -> int:
    value: int = _START.unpack_from(packed, 8)[0]
    return value


def size_in_bytes(packed: bytes) -> int:
    return _HEADER.unpack_from(packed)[5]  # type: ignore[no-any-return]


def state(packed: bytes) -> RemoteLogSegmentState:
    return _STATES[packed[_STATE_AT]]


def txn_index_empty(packed: bytes) -> bool:
    return bool(packed[_FLAGS_AT] & _TXN_INDEX_EMPTY)


def leader_epochs(packed: bytes) -> list[tuple[int, int]]:
    """(leader epoch, start offset) pairs, ascending by epoch."""
    count = struct.unpack_from("<H", packed, _HEADER.size - 2)[0]
    return list(_EPOCH.iter_unpack(packed[_HEADER.size : _HEADER.size + count * _EPOCH.size]))


def epoch_end_offset(packed: bytes, leader_epoch: int) -> int:
    """Last offset of `leader_epoch` in the segment: the next epoch's start - 1, else its end.

    Kafka's RemoteLogMetadataCache.highestOffsetForEpoch(epoch, segment).
    """
    for epoch, start in leader_epochs(packed):
        if epoch > leader_epoch:
            return start - 1
    return end_offset(packed)
