"""A write learns whether its event was applied, whichever of its acknowledgement and
its consumption comes first, and the cache applies every record once, in offset order.

The broker can hand the record to the consumer before the producer's
acknowledgement reaches us, so the writer may start waiting for an offset that
is already applied; or the acknowledgement comes first, and the write is
applied from the bytes sent when it is next in offset order. Which way the
race goes cannot be forced on a real broker; the producers here choose it.
"""

import asyncio
import uuid

import pytest
from support.services import metadata_config

from remotelog.core.errors import InvalidStateTransitionError
from remotelog.core.metadata_serde import deserialize
from remotelog.core.model import TopicIdPartition
from remotelog.metadata import partition_store
from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager
from remotelog.metadata.partition_state import MetadataPartitionState
from remotelog.metadata.partition_store import Assigned
from remotelog.metadata.topic import TopicInfo

from .scenarios import COPIED, DELETING, Seg, metadata_of, update_of

TIP = TopicIdPartition(uuid.UUID(int=11), "acks", 0)
GENERATION = 1


class ConsumedBeforeAcked:
    """publish(): the records up to ours are consumed first, then the offset comes back."""

    def __init__(self, manager, ahead_of_ours) -> None:
        self.manager = manager
        self.ahead_of_ours = ahead_of_ours  # events another writer got in first

    async def publish(self, partition: int, value, key=None) -> int:
        state = self.manager.store.assigned[partition].state
        events = [*self.ahead_of_ours, deserialize(value)]
        offsets = range(state.next_offset, state.next_offset + len(events))
        records = [(partition, GENERATION, o, e) for o, e in zip(offsets, events, strict=True)]
        self.manager.store.on_records(records, [])
        return offsets[-1]


class AckedBeforeConsumed:
    """publish(): the offset comes back before the consumer has seen the record,
    `behind` records of other writers after the next offset to apply."""

    def __init__(self, manager, behind=0) -> None:
        self.manager = manager
        self.behind = behind
        self.written: list[tuple[int, bytes]] = []

    async def publish(self, partition: int, value, key=None) -> int:
        offset = self.manager.store.assigned[partition].state.next_offset + self.behind
        self.written.append((offset, value))
        return offset


class HandedRecords:
    """The metadata consumer's part: nothing consumed but what a test hands the store."""

    def start(self) -> None: ...

    def assign(self, partition: int, offset: int, generation: int) -> None: ...

    def unassign(self, partition: int) -> None: ...

    def close(self) -> None: ...


class NoProducer:
    async def publish(self, partition: int, value, key=None) -> int:
        raise AssertionError("each test chooses how its write's race goes")

    def close(self) -> None: ...


@pytest.fixture
def manager(tmp_path):
    """A manager serving TIP's metadata partition, caught up, with one segment being copied."""
    config = metadata_config(tmp_path, "127.0.0.1:1")
    topic = TopicInfo(uuid.UUID(int=1), config.metadata_topic_num_partitions)
    manager = TopicBasedRemoteLogMetadataManager(config, topic, NoProducer(), HandedRecords())
    partition = manager.store.metadata_partition(TIP)
    state = MetadataPartitionState(partition)
    manager.store.assigned[partition] = Assigned(state, GENERATION, caught_up=True)
    manager.store.registered.add(TIP)
    segment = metadata_of(TIP, Seg("raced", 0, 9, {0: 0}))
    assert state.apply(0, segment) is None
    return manager, segment


async def test_a_dropped_event_consumed_before_its_ack_is_reported(manager):
    manager, segment = manager
    # Another writer's DELETE_SEGMENT_STARTED lands first: our COPY_SEGMENT_FINISHED
    # is dropped by every consumer, and we must be told.
    manager.producer.producer = ConsumedBeforeAcked(manager, [update_of(segment, DELETING)])
    with pytest.raises(InvalidStateTransitionError, match="not applied"):
        await manager.update_remote_log_segment_metadata(update_of(segment, COPIED))
    (listed,) = manager.remote_log_segments(TIP)
    assert listed.state is DELETING


async def test_an_applied_event_consumed_before_its_ack_succeeds(manager):
    manager, segment = manager
    manager.producer.producer = ConsumedBeforeAcked(manager, [])
    await manager.update_remote_log_segment_metadata(update_of(segment, COPIED))
    (listed,) = manager.remote_log_segments(TIP)
    assert listed.state is COPIED


async def test_only_the_latest_drops_are_remembered(manager, monkeypatch):
    manager, _ = manager
    monkeypatch.setattr(partition_store, "RECENT_DROPS_KEPT", 3)
    assigned = manager.store.assigned[manager.store.metadata_partition(TIP)]
    for offset in range(10, 15):
        assigned.remember_drop(offset, f"dropped {offset}")
    assert assigned.recent_drops == {12: "dropped 12", 13: "dropped 13", 14: "dropped 14"}


async def test_an_acknowledged_write_next_in_order_is_applied_once(manager):
    manager, segment = manager
    producer = manager.producer.producer = AckedBeforeConsumed(manager)
    partition = manager.store.metadata_partition(TIP)
    applied_before = manager.events_applied
    # Returns with nothing consumed: applied from the bytes this instance sent.
    await manager.update_remote_log_segment_metadata(update_of(segment, COPIED))
    (listed,) = manager.remote_log_segments(TIP)
    assert listed.state is COPIED
    ((offset, value),) = producer.written
    assert manager.store.assigned[partition].state.next_offset == offset + 1
    # The consumer's copy of the same record comes later and is not applied again
    # (applied twice, COPY_SEGMENT_FINISHED -> COPY_SEGMENT_FINISHED would be dropped).
    manager.store.on_records([(partition, GENERATION, offset, deserialize(value))], [])
    assert manager.events_applied == applied_before + 1
    assert manager.store.assigned[partition].recent_drops == {}
    (listed,) = manager.remote_log_segments(TIP)
    assert listed.state is COPIED


async def test_a_write_behind_records_not_consumed_waits_and_applies_in_order(manager):
    manager, segment = manager
    manager.producer.producer = AckedBeforeConsumed(manager, behind=1)
    partition = manager.store.metadata_partition(TIP)
    next_offset = manager.store.assigned[partition].state.next_offset
    write = asyncio.create_task(
        manager.update_remote_log_segment_metadata(update_of(segment, COPIED))
    )
    await asyncio.sleep(0.05)
    assert not write.done()  # another writer's record comes first, unseen yet
    # It arrives: another writer's DELETE_SEGMENT_STARTED at the offset before ours.
    manager.store.on_records(
        [(partition, GENERATION, next_offset, update_of(segment, DELETING))], []
    )
    with pytest.raises(InvalidStateTransitionError, match="not applied"):
        await write
    (listed,) = manager.remote_log_segments(TIP)
    assert listed.state is DELETING
    assert manager.store.assigned[partition].state.next_offset == next_offset + 2
