"""The cache alone: KIP-405 scenarios, the offset map against a model, packing, snapshots."""

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remotelog.core.model import TopicIdPartition
from remotelog.metadata import packed
from remotelog.metadata import snapshot as snapshots
from remotelog.metadata.cache import OffsetIndex
from remotelog.metadata.partition_state import MetadataPartitionState

from .scenarios import COPIED, SCENARIOS, Scenario, Seg, metadata_of, run, update_of

TIP = TopicIdPartition(uuid.UUID(int=7), "orders", 3)


class StateTarget:
    """Scenario target over one metadata partition's state; events get increasing offsets."""

    def __init__(self) -> None:
        self.state = MetadataPartitionState(0)

    async def add(self, metadata):
        assert self.state.apply(self.state.next_offset, metadata) is None

    async def update(self, update):
        assert self.state.apply(self.state.next_offset, update) is None

    def _cache(self, tip):
        return self.state.cache(tip)

    async def lookup(self, tip, epoch, offset):
        return self._cache(tip).remote_log_segment_metadata(epoch, offset)

    async def highest(self, tip, epoch):
        return self._cache(tip).highest_offset_for_epoch(epoch)

    async def list(self, tip, epoch):
        return self._cache(tip).list_remote_log_segments(epoch)

    async def size(self, tip, epoch):
        return self._cache(tip).remote_log_size(epoch)

    async def txn(self, tip, epoch, offset):
        return self._cache(tip).next_segment_with_txn_index(epoch, offset)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name[:40])
async def test_scenario_on_the_cache(scenario: Scenario):
    assert await run(scenario, TIP, StateTarget()) == scenario.expectations


async def test_snapshot_round_trip_answers_like_the_original_after_every_scenario(tmp_path):
    # Every scenario's final state, written and read back, answers every
    # question identically (the epoch maps are restored exactly, not rebuilt).
    target = StateTarget()
    for number, scenario in enumerate(SCENARIOS):
        tip = TopicIdPartition(uuid.UUID(int=100 + number), f"t{number}", number)
        await run(scenario, tip, target)
    snap = snapshots.Snapshot(uuid.UUID(int=1), 50, frozenset({TIP}), {0: target.state})
    snapshots.write(tmp_path, snap)
    loaded = snapshots.load(tmp_path)
    assert loaded.topic_id == uuid.UUID(int=1)
    assert loaded.num_partitions == 50
    assert loaded.registered == frozenset({TIP})
    restored = loaded.states[0]
    assert restored.next_offset == target.state.next_offset
    assert set(restored.caches) == set(target.state.caches)
    for tip, cache in target.state.caches.items():
        twin = restored.caches[tip]
        assert twin.segments == cache.segments
        for epoch in range(-1, 7):
            assert twin.list_remote_log_segments(epoch) == cache.list_remote_log_segments(epoch)
            assert twin.highest_offset_for_epoch(epoch) == cache.highest_offset_for_epoch(epoch)
            for offset in range(0, 420, 7):
                assert twin.remote_log_segment_metadata(epoch, offset) == (
                    cache.remote_log_segment_metadata(epoch, offset)
                )
        assert twin.list_remote_log_segments() == cache.list_remote_log_segments()


def test_snapshot_refuses_corruption_truncation_and_other_versions(tmp_path):
    state = MetadataPartitionState(4)
    state.apply(0, metadata_of(TIP, Seg("a", 0, 10, {0: 0})))
    data = snapshots.encode(snapshots.Snapshot(uuid.UUID(int=1), 50, frozenset(), {4: state}))
    assert snapshots.decode(data).states[4].next_offset == 1
    flipped = bytearray(data)
    flipped[-3] ^= 0x40
    with pytest.raises(snapshots.SnapshotError, match="CRC mismatch"):
        snapshots.decode(bytes(flipped))
    with pytest.raises(snapshots.SnapshotError, match="CRC mismatch"):
        snapshots.decode(data[:-5])
    with pytest.raises(snapshots.SnapshotError, match="not a remotelog metadata snapshot"):
        snapshots.decode(b"X" * 40)
    with pytest.raises(snapshots.SnapshotError, match="format version 9"):
        snapshots.decode(data[:8] + (9).to_bytes(2, "little") + data[10:])
    assert snapshots.load(tmp_path) is None


def test_partition_delete_finished_drops_the_cache_and_ignores_late_events():
    from remotelog.core.model import RemotePartitionDeleteMetadata
    from remotelog.core.states import RemotePartitionDeleteState as D

    state = MetadataPartitionState(0)
    metadata = metadata_of(TIP, Seg("a", 0, 10, {0: 0}))
    assert state.apply(0, metadata) is None
    assert (
        state.apply(1, RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_MARKED, 1, 0)) is None
    )
    # A second marker (controller failover) is a self-transition: accepted once more, same state.
    assert (
        state.apply(2, RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_MARKED, 2, 0)) is None
    )
    assert state.apply(
        3, RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_FINISHED, 3, 0)
    ) == ("DELETE_PARTITION_MARKED can not move to DELETE_PARTITION_FINISHED")
    assert (
        state.apply(4, RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_STARTED, 4, 0)) is None
    )
    # A marker replayed after the deletion started is dropped: processed once.
    assert "can not move" in state.apply(
        5, RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_MARKED, 5, 0)
    )
    assert (
        state.apply(6, RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_FINISHED, 6, 0))
        is None
    )
    assert state.cache(TIP) is None
    assert TIP in state.deleted
    assert state.apply(7, update_of(metadata, COPIED)) == f"partition {TIP} was deleted"
    assert state.cache(TIP) is None
    assert state.next_offset == 8


def test_invalid_transitions_and_unknown_segments_are_dropped_with_a_reason():
    state = MetadataPartitionState(0)
    metadata = metadata_of(TIP, Seg("a", 0, 10, {0: 0}))
    assert "no remote log segment metadata" in state.apply(0, update_of(metadata, COPIED))
    assert state.apply(1, metadata) is None
    from .scenarios import DELETED, DELETING

    assert state.apply(2, update_of(metadata, DELETED)) == (
        "COPY_SEGMENT_STARTED can not move to DELETE_SEGMENT_FINISHED"
    )
    assert state.apply(3, update_of(metadata, DELETING)) is None
    assert state.apply(4, update_of(metadata, COPIED)) == (
        "DELETE_SEGMENT_STARTED can not move to COPY_SEGMENT_FINISHED"
    )
    # Re-adding a segment being deleted is refused too (only a retried add is allowed).
    assert state.apply(5, metadata) == "DELETE_SEGMENT_STARTED can not move to COPY_SEGMENT_STARTED"
    assert state.cache(TIP).segment_state(metadata.remote_log_segment_id.id.bytes) is DELETING


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "remove", "remove_other", "pop"]),
            st.integers(0, 60),
            st.integers(0, 3),
        ),
        max_size=300,
    )
)
@settings(max_examples=200, deadline=None)
def test_offset_index_behaves_like_a_sorted_map(operations):
    index = OffsetIndex()
    model: dict[int, bytes] = {}
    for op, key, value in operations:
        segment_id = bytes([value]) * 16
        if op == "put":
            index.put(key, segment_id)
            model[key] = segment_id
        elif op == "remove":
            index.remove(key, segment_id)
            if model.get(key) == segment_id:
                del model[key]
        elif op == "remove_other":
            existing = model.get(key)
            if existing is not None:
                index.remove(key, existing)
                del model[key]
        elif op == "pop" and model:
            index.pop_last()
            del model[max(model)]
        assert list(index.items()) == sorted(model.items())
        assert len(index) == len(model)
        last = index.last()
        assert last == (max(model.items()) if model else None)
        assert index.first_key() == (min(model) if model else None)
        for probe in (key, key - 1, key + 1, 0, 61):
            below = [k for k in model if k <= probe]
            assert index.floor(probe) == (model[max(below)] if below else None)


def test_offset_index_compacts_tombstones_after_mass_deletion():
    index = OffsetIndex()
    for key in range(1000):
        index.put(key * 10, key.to_bytes(16, "big"))
    for key in range(900):
        index.remove(key * 10, key.to_bytes(16, "big"))
    assert len(index) == 100
    assert len(index._keys) < 200  # compacted, not 1000 entries with 900 tombstones
    assert index.floor(5) is None
    assert index.floor(9000) == (900).to_bytes(16, "big")


@given(
    start=st.integers(0, 2**62),
    length=st.integers(0, 2**20),
    epochs=st.dictionaries(
        st.integers(0, 2**31 - 1), st.integers(0, 2**40), min_size=1, max_size=5
    ),
    custom=st.one_of(st.none(), st.binary(max_size=200)),
    txn_empty=st.booleans(),
    max_ts=st.integers(-(2**63), 2**63 - 1),
)
def test_packing_round_trips_every_field(start, length, epochs, custom, txn_empty, max_ts):
    from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata

    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(TIP, uuid.uuid4()),
        start_offset=start,
        end_offset=start + length,
        max_timestamp_ms=max_ts,
        broker_id=-1,
        event_timestamp_ms=-5,
        segment_size_in_bytes=2**31 - 1,
        segment_leader_epochs=epochs,
        custom_metadata=custom,
        txn_index_empty=txn_empty,
    )
    value = packed.pack(metadata)
    segment_id = metadata.remote_log_segment_id.id.bytes
    assert packed.unpack(TIP, segment_id, value) == metadata
    assert packed.start_offset(value) == start
    assert packed.end_offset(value) == start + length
    assert packed.size_in_bytes(value) == 2**31 - 1
    assert packed.txn_index_empty(value) is txn_empty
    assert packed.leader_epochs(value) == sorted(epochs.items())
