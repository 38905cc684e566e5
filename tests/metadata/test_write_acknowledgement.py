"""A write learns whether its event was applied, even when consumption beats the producer's ack.

The broker can hand the record to the consumer before the producer's
acknowledgement reaches us, so the writer may start waiting for an offset that
is already applied. Which way the race goes cannot be forced on a real broker;
the producer here delivers the records to the consumer's sink before it
returns the offset, the losing order.
"""

import uuid

import pytest
from support.services import metadata_config

from remotelog.core.errors import InvalidStateTransitionError
from remotelog.core.metadata_serde import deserialize
from remotelog.core.model import TopicIdPartition
from remotelog.metadata import manager as manager_module
from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager, _Assigned
from remotelog.metadata.partition_state import MetadataPartitionState

from .scenarios import COPIED, DELETING, Seg, metadata_of, update_of

TIP = TopicIdPartition(uuid.UUID(int=11), "acks", 0)
GENERATION = 1


class ConsumedBeforeAcked:
    """publish(): the records up to ours are consumed first, then the offset comes back."""

    def __init__(self, manager, ahead_of_ours) -> None:
        self.manager = manager
        self.ahead_of_ours = ahead_of_ours  # events another writer got in first

    async def publish(self, partition: int, value: bytes) -> int:
        state = self.manager._assigned[partition].state
        events = [*self.ahead_of_ours, deserialize(value)]
        offsets = range(state.next_offset, state.next_offset + len(events))
        records = [(partition, GENERATION, o, e) for o, e in zip(offsets, events, strict=True)]
        self.manager._on_records(records, [])
        return offsets[-1]


@pytest.fixture
def manager(tmp_path):
    """A manager serving TIP's metadata partition, caught up, with one segment being copied."""
    manager = TopicBasedRemoteLogMetadataManager(metadata_config(tmp_path, "127.0.0.1:1"))
    partition = manager._metadata_partition(TIP)
    state = MetadataPartitionState(partition)
    manager._assigned[partition] = _Assigned(state, GENERATION, caught_up=True)
    manager._registered.add(TIP)
    segment = metadata_of(TIP, Seg("raced", 0, 9, {0: 0}))
    assert state.apply(0, segment) is None
    return manager, segment


async def test_a_dropped_event_consumed_before_its_ack_is_reported(manager):
    manager, segment = manager
    # Another writer's DELETE_SEGMENT_STARTED lands first: our COPY_SEGMENT_FINISHED
    # is dropped by every consumer, and we must be told.
    manager._producer = ConsumedBeforeAcked(manager, [update_of(segment, DELETING)])
    with pytest.raises(InvalidStateTransitionError, match="not applied"):
        await manager.update_remote_log_segment_metadata(update_of(segment, COPIED))
    (listed,) = manager.list_remote_log_segments(TIP)
    assert listed.state is DELETING


async def test_an_applied_event_consumed_before_its_ack_succeeds(manager):
    manager, segment = manager
    manager._producer = ConsumedBeforeAcked(manager, [])
    await manager.update_remote_log_segment_metadata(update_of(segment, COPIED))
    (listed,) = manager.list_remote_log_segments(TIP)
    assert listed.state is COPIED


async def test_only_the_latest_drops_are_remembered(manager, monkeypatch):
    manager, _ = manager
    monkeypatch.setattr(manager_module, "RECENT_DROPS_KEPT", 3)
    assigned = manager._assigned[manager._metadata_partition(TIP)]
    for offset in range(10, 15):
        assigned.remember_drop(offset, f"dropped {offset}")
    assert assigned.recent_drops == {12: "dropped 12", 13: "dropped 13", 14: "dropped 14"}
