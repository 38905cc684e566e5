"""KIP-1266's keys of `__remote_log_metadata` records, for a topic that is compacted.

A keyed record's key is a RemoteLogSegmentMetadataKey of 37 bytes: topic id (16),
partition (int32), segment id (16), segment state (one byte, Kafka's id), all
big-endian. When a segment reaches DELETE_SEGMENT_FINISHED its earlier states'
keys get null-value tombstones, so compaction leaves one record of a deleted
segment: the one that says it is gone, which a reader that is behind still sees.

The KIP keys segments; a partition's delete records are keyed here the same way
with the all-zero segment id, an id Kafka never gives a segment (Uuid.ZERO_UUID),
and the partition's delete state. Readers never look at keys: values say it all.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from remotelog.core.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState

_KEY = struct.Struct(">16si16sB")
KEY_BYTES = _KEY.size  # 37
_NO_SEGMENT = uuid.UUID(int=0)
# What a DELETE_SEGMENT_FINISHED tombstones: every state a segment passed through before.
_EARLIER_STATES = (
    RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataKey:
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    state: int

    def to_bytes(self) -> bytes:
        return _KEY.pack(self.topic_id.bytes, self.partition, self.segment_id.bytes, self.state)

    @classmethod
    def parse(cls, data: bytes) -> RemoteLogSegmentMetadataKey:
        if len(data) != KEY_BYTES:
            raise ValueError(f"a RemoteLogSegmentMetadataKey is {KEY_BYTES} bytes, not {len(data)}")
        topic_id, partition, segment_id, state = _KEY.unpack(data)
        return cls(uuid.UUID(bytes=topic_id), partition, uuid.UUID(bytes=segment_id), state)


def _segment_key(segment: RemoteLogSegmentId, state: RemoteLogSegmentState) -> bytes:
    tip = segment.topic_id_partition
    return RemoteLogSegmentMetadataKey(
        tip.topic_id, tip.partition, segment.id, state.value
    ).to_bytes()


def _partition_key(tip: TopicIdPartition, state: int) -> bytes:
    return RemoteLogSegmentMetadataKey(tip.topic_id, tip.partition, _NO_SEGMENT, state).to_bytes()


def record_key(event: RemoteLogMetadata) -> bytes:
    """The key `event`'s record is written under."""
    if isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
        return _segment_key(event.remote_log_segment_id, event.state)
    if isinstance(event, RemotePartitionDeleteMetadata):
        return _partition_key(event.topic_id_partition, event.state.value)
    raise TypeError(f"{type(event).__name__} is not written to the metadata topic")


def tombstone_keys(event: RemoteLogMetadata) -> list[bytes]:
    """The keys a record of `event` makes obsolete: a segment's earlier states, once
    its deletion finished; none for anything else."""
    if (
        isinstance(event, RemoteLogSegmentMetadataUpdate)
        and event.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
    ):
        return [_segment_key(event.remote_log_segment_id, s) for s in _EARLIER_STATES]
    return []
