"""The copy task and local retention against real services (Kafka's tiered-storage integration
tests, where they apply): offload, local deletion, reading everything back, restarts."""

import json
import shutil

import pytest
from support.services import new_partition
from support.telemetry import counter
from support.waiting import eventually

from remotelog.client import PartitionAssignment
from remotelog.core import metrics as m
from remotelog.core.errors import InvalidArgumentError, UnknownTopicOrPartitionError
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.scheduler.partition import Assignment, Role
from remotelog.scheduler.scheduler import Kind

from .conftest import FINISHED, Broker

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED


async def test_offload_local_deletion_and_every_record_from_remote_after_a_restart(stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(4)  # tiering enabled on a partition that already has segments
    scheduler = await stack.start_scheduler(**{"log.local.retention.ms": "1"})
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])

    async def offloaded():
        state = await scheduler.state_of(tip)
        return state.highest_tiered_offset == broker.rolled_end and state.copy_lag_segments == 0

    await eventually(offloaded)
    # Local retention freed every tiered segment; the active one stays.
    await eventually(lambda: len(list(broker.directory.glob("*.log"))) == 1)
    state = await scheduler.state_of(tip)
    assert state.local_log_start_offset == broker.log.active_segment.base_offset
    assert state.log_start_offset == 0
    assert state.last_error_message == ""

    segments = await stack.segments(tip)
    assert [(s.start_offset, s.end_offset) for s in segments] == [
        (0, 29),
        (30, 59),
        (60, 89),
        (90, 119),
    ]
    assert all(s.state is FINISHED for s in segments)
    assert segments[0].segment_leader_epochs == ((0, 0),)
    assert segments[0].max_timestamp_ms > 0

    # More data after tiering started; then every service restarts.
    broker.segments(1)
    await eventually(offloaded)
    await stack.stop()
    await stack.start_store()
    await stack.start_metadata()
    scheduler = await stack.start_scheduler(**{"log.local.retention.ms": "1"})
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])
    await eventually(offloaded)

    remote = await stack.remote_records(tip)
    assert remote == {o: kv for o, kv in broker.records.items() if o <= broker.rolled_end}
    # The restarted scheduler found the highest tiered offset and copied nothing twice.
    segments = await stack.segments(tip)
    assert len(segments) == 5
    assert len({s.start_offset for s in segments}) == 5


async def test_local_retention_ms_1_rolls_and_offloads_as_segments_age(fs_stack, tmp_path):
    clock = Clock()
    tip = new_partition("clicks")
    broker = Broker(tmp_path / "broker-0", tip, clock=clock, segment_ms=1000)
    scheduler = await fs_stack.start_scheduler(**{"log.local.retention.ms": "1"})
    # The simulated clock is in 2023: unlimited retention keeps the remote copies.
    await scheduler.client.on_partition_leadership_changes([broker.assignment(retention_ms=-1)])
    for _ in range(4):
        broker.produce(2)
        clock.now += 2  # segment.ms passed: the next append rolls
    broker.produce(1)
    assert len(list(broker.directory.glob("*.log"))) == 5

    await eventually(lambda: len(list(broker.directory.glob("*.log"))) == 1)
    segments = await fs_stack.segments(tip)
    assert [(s.start_offset, s.end_offset) for s in segments] == [
        (0, 19),
        (20, 39),
        (40, 59),
        (60, 79),
    ]
    remote = await fs_stack.remote_records(tip)
    assert remote == {o: kv for o, kv in broker.records.items() if o < 80}


class Clock:
    def __init__(self):
        self.now = 1_700_000_000.0

    def __call__(self):
        return self.now


async def test_untiered_and_unstable_segments_stay_local(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(3)
    broker.log.set_high_watermark(45)  # segment 30..59 is not fully replicated yet
    scheduler = await fs_stack.start_scheduler(**{"log.local.retention.ms": "1"})
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])

    await eventually(lambda: scheduler.tiered_to(tip, 29))

    # Local retention follows the copy within the run: the state may be seen between.
    async def retained():
        return (await scheduler.state_of(tip)).local_log_start_offset == 30

    await eventually(retained)
    state = await scheduler.state_of(tip)
    assert state.highest_tiered_offset == 29
    assert state.copy_lag_segments == 2
    assert sorted(p.name for p in broker.directory.glob("*.log")) == [
        "00000000000000000030.log",
        "00000000000000000060.log",
        "00000000000000000090.log",
    ]
    broker.log.set_high_watermark(broker.log.log_end_offset)
    await eventually(lambda: scheduler.tiered_to(tip, 89))


async def test_list_offsets_answers_kafkas_tiered_sentinels(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(2)
    broker.produce(1, epoch=3)
    scheduler = await fs_stack.start_scheduler()
    client = scheduler.client
    await client.on_partition_leadership_changes([broker.assignment(epoch=3)])
    await eventually(lambda: scheduler.tiered_to(tip, 59))

    assert await client.list_offsets(tip, -4) == (0, 0)  # nothing deleted locally
    assert await client.list_offsets(tip, -5) == (59, 0)
    assert await client.list_offsets(tip, -6) == (60, 3)
    with pytest.raises(Exception, match="timestamp"):
        await client.list_offsets(tip, -1)


async def test_custom_metadata_over_the_cap_deletes_the_copy_and_stops_copying(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(2)
    scheduler = await fs_stack.start_scheduler(
        **{"remote.log.metadata.custom.metadata.max.bytes": "1"}
    )
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])

    async def stopped():
        state = await scheduler.state_of(tip)
        return state.last_error_message and state

    state = await eventually(stopped)
    assert "custom metadata" in state.last_error_message
    assert state.highest_tiered_offset == -1
    segments = await fs_stack.segments(tip)
    assert segments == []  # DELETE_SEGMENT_FINISHED: forgotten, as Kafka does
    assert fs_stack.store.objects() == {}
    assert len(list(broker.directory.glob("*.log"))) == 3  # nothing deleted locally


async def test_a_stale_leader_copies_nothing(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(2, epoch=0)
    broker.produce(1, epoch=4)  # another broker led at epoch 4 since
    scheduler = await fs_stack.start_scheduler()
    await scheduler.client.on_partition_leadership_changes([broker.assignment(epoch=2)])
    await eventually(lambda: scheduler.scheduler.runs[Kind.COPY] >= 3)
    assert await fs_stack.segments(tip) == []
    assert (await scheduler.state_of(tip)).highest_tiered_offset == -1


async def test_bad_assignments_are_refused_naming_the_field(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    scheduler = await fs_stack.start_scheduler()
    client = scheduler.client
    cases = [
        (PartitionAssignment(tip, tmp_path / "missing", 0), "leaders[0].log_dir"),
        (PartitionAssignment(tip, broker.directory, -1), "leaders[0].leader_epoch"),
        (
            PartitionAssignment(new_partition(), broker.directory, 0),
            "leaders[0].topic_id_partition.topic_id",
        ),
        (PartitionAssignment(tip, broker.directory, 0, retention_ms=-5), "retention_ms"),
        # Another partition's directory: the high watermark would be another's.
        (
            PartitionAssignment(TopicIdPartition(tip.topic_id, tip.topic, 5), broker.directory, 0),
            f"leaders[0].log_dir: {broker.directory} is not named {tip.topic}-5",
        ),
    ]
    for assignment, field in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            await client.on_partition_leadership_changes([assignment])
        assert field in str(caught.value)
    with pytest.raises(UnknownTopicOrPartitionError):
        await client.partition_state(tip)
    with pytest.raises(UnknownTopicOrPartitionError):
        await client.update_log_start_offset(tip, 5)
    assert scheduler.scheduler.partitions == {}


async def test_a_corrupt_leader_epoch_checkpoint_stops_copying_naming_the_file(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(2)
    checkpoint = broker.directory / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n1\nnot an entry\n")
    scheduler = await fs_stack.start_scheduler()
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])

    async def failed():
        state = await scheduler.state_of(tip)
        return state.last_error_message and state

    state = await eventually(failed)
    assert f"cannot copy from {broker.directory}" in state.last_error_message
    assert str(checkpoint) in state.last_error_message
    assert state.highest_tiered_offset == -1


async def test_direct_storage_writes_make_the_objects_the_store_serves(stack, tmp_path, telemetry):
    """With direct storage writes the scheduler runs the segment store in-process over
    the same backend: the store service reads back what it wrote, with the same custom
    metadata, and a deletion of the remote log empties the partition's prefix. Each
    copy is counted once under each meaning: Kafka's RemoteCopyBytesPerSec the log,
    the store's own the log and its indexes."""
    tip, gone = new_partition(), new_partition("gone")
    reader, _ = telemetry

    def copied():  # by name across every meter, as a Prometheus scrape shows them
        return (
            counter(reader, m.REMOTE_COPY_BYTES.name, tip.topic),
            counter(reader, m.STORE_COPY_BYTES.name, tip.topic),
        )

    copied_before = copied()
    brokers = [Broker(tmp_path / "broker-0", t) for t in (tip, gone)]
    for broker in brokers:
        broker.segments(3)
    scheduler = await stack.start_scheduler(
        **{
            "remote.log.manager.direct.storage.write.enabled": "true",
            "segment.store.address": "127.0.0.1:1",  # never called: nothing listens there
            **stack.storage_properties(),
        }
    )
    await scheduler.client.on_partition_leadership_changes([b.assignment() for b in brokers])
    for broker in brokers:
        await eventually(lambda broker=broker: scheduler.tiered_to(broker.tip, broker.rolled_end))

    segments = await stack.segments(tip)
    assert [(s.start_offset, s.end_offset, s.state) for s in segments] == [
        (0, 29, FINISHED),
        (30, 59, FINISHED),
        (60, 89, FINISHED),
    ]
    for segment in segments:
        custom = json.loads(segment.custom_metadata or b"{}")
        assert custom["remote_size"] > segment.segment_size_in_bytes  # the log and its indexes
    logs = sum(s.segment_size_in_bytes for s in segments)
    stored = sum(json.loads(s.custom_metadata or b"{}")["remote_size"] for s in segments)
    assert copied() == (copied_before[0] + logs, copied_before[1] + stored)
    assert await stack.remote_records(tip) == {
        o: kv for o, kv in brokers[0].records.items() if o <= brokers[0].rolled_end
    }
    objects = stack.store.objects()
    assert len([key for key in objects if "gone-" in key]) == 9  # log, indexes, manifest each

    await scheduler.client.stop_partitions([gone], delete_remote_log=True)
    assert await stack.segments(gone) == []
    assert [key for key in stack.store.objects() if "gone-" in key] == []
    assert len(stack.store.objects()) == 9


async def test_copies_through_the_stores_short_circuit(stack, tmp_path):
    """With the store's short-circuit socket the scheduler lends its segment files by
    descriptor: its gRPC address here has no server, so every copy took the socket."""
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(3)
    scheduler = await stack.start_scheduler(
        **{
            "segment.store.address": "127.0.0.1:1",  # never called: nothing listens there
            "segment.store.short.circuit.socket.path": stack.short_circuit_socket,
        }
    )
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])

    await eventually(lambda: scheduler.tiered_to(tip, broker.rolled_end))
    assert await stack.remote_records(tip) == {
        o: kv for o, kv in broker.records.items() if o <= broker.rolled_end
    }
    for segment in await stack.segments(tip):
        log = broker.directory / f"{segment.start_offset:020d}.log"
        data = b"".join([c async for c in stack.store.client.fetch_log_segment(segment, 0)])
        assert data == log.read_bytes()


async def test_discovery_hands_over_what_is_there_and_leaves_a_vanished_directory(
    fs_stack, tmp_path
):
    """Discovery's hand-over is checked once, partition by partition: a directory gone
    since the look (a reassignment) leaves the others to be tiered."""
    kept, moved = (Broker(tmp_path / "broker-0", new_partition(t)) for t in ("kept", "moved"))
    kept.segments(2)
    scheduler = await fs_stack.start_scheduler()
    found = [Assignment(broker.tip, broker.directory, 0, Role.LEADER) for broker in (kept, moved)]
    shutil.rmtree(moved.directory)
    taken = await scheduler.scheduler.take_found(found)
    assert taken == found[:1]
    await eventually(lambda: scheduler.tiered_to(kept.tip, kept.rolled_end))
    with pytest.raises(UnknownTopicOrPartitionError):
        await scheduler.state_of(moved.tip)
