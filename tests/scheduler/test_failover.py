"""Leadership moves, crashes, store outages and several scheduler instances."""

import time
import uuid

from support.services import new_partition
from support.waiting import eventually

from remotelog.client.segment_store import LogSegmentData
from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, kafka_uuid_str
from remotelog.core.states import RemoteLogSegmentState
from remotelog.kafka.state_files import producer_snapshot_bytes
from remotelog.scheduler.scheduler import Kind

from .conftest import FINISHED, Broker

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED


def replicate(brokers, method, *args, **kwargs):
    """The same writes on every replica (what Kafka's replication achieves)."""
    for broker in brokers:
        getattr(broker, method)(*args, **kwargs)


async def test_a_leadership_move_continues_from_the_highest_tiered_offset(fs_stack, tmp_path):
    tip = new_partition()
    a, b = Broker(tmp_path / "broker-a", tip), Broker(tmp_path / "broker-b", tip)
    replicate([a, b], "segments", 3, epoch=0)
    beside_a = await fs_stack.start_scheduler("a", **{"broker.id": "1"})
    beside_b = await fs_stack.start_scheduler("b", **{"broker.id": "2"})
    await beside_a.client.on_partition_leadership_changes([a.assignment(0)])
    await beside_b.client.on_partition_leadership_changes([], [b.assignment(0)])
    await eventually(lambda: beside_a.tiered_to(tip, 89))
    await eventually(lambda: beside_b.tiered_to(tip, 89))  # the follower task tracks it

    # Broker b becomes leader at epoch 1 and writes; a follows.
    replicate([a, b], "segments", 2, epoch=1)
    await beside_a.client.on_partition_leadership_changes([], [a.assignment(1)])
    await beside_b.client.on_partition_leadership_changes([b.assignment(1)])
    await eventually(lambda: beside_b.tiered_to(tip, 149))
    await eventually(lambda: beside_a.tiered_to(tip, 149))

    segments = await fs_stack.segments(tip)
    assert [(s.start_offset, s.end_offset, s.broker_id) for s in segments] == [
        (0, 29, 1),
        (30, 59, 1),
        (60, 89, 1),
        (90, 119, 2),
        (120, 149, 2),
    ]
    assert segments[3].segment_leader_epochs == ((1, 90),)
    assert all(s.state is FINISHED for s in segments)


async def test_a_crash_between_started_and_finished_is_cleaned_up_and_copied_once(stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(2)
    # What a scheduler that crashed mid-copy leaves: STARTED metadata, (part of) the objects.
    first = broker.log.segments[0]
    crashed = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        0,
        29,
        int(time.time() * 1000),
        0,
        int(time.time() * 1000) - 600_000,
        first.size,
        ((0, 0),),
    )
    await stack.metadata.client.on_partition_leadership_changes([tip])
    await stack.metadata.client.add_remote_log_segment_metadata(crashed)
    await stack.store.client.copy_log_segment_data(
        crashed,
        LogSegmentData(
            log_segment=first.path(".log"),
            offset_index=first.path(".index"),
            time_index=first.path(".timeindex"),
            producer_snapshot_index=producer_snapshot_bytes([]),
            leader_epoch_index=b"0\n1\n0 0\n",
        ),
    )
    crashed_objects = [k for k in stack.store.objects() if named(crashed, k)]
    assert crashed_objects

    scheduler = await stack.start_scheduler(
        **{"remote.log.manager.dangling.segment.grace.ms": "1000"}
    )
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])

    async def settled():
        segments = await stack.segments(tip)
        done = len(segments) == 2 and all(s.state is FINISHED for s in segments)
        return done and segments

    segments = await eventually(settled)
    assert [(s.start_offset, s.end_offset) for s in segments] == [(0, 29), (30, 59)]
    assert crashed.remote_log_segment_id not in {s.remote_log_segment_id for s in segments}
    objects = stack.store.objects()
    assert not any(key in objects for key in crashed_objects)
    assert all(any(named(s, key) for s in segments) for key in objects)


def named(segment, key: str) -> bool:
    return kafka_uuid_str(segment.remote_log_segment_id.id) in key


async def test_a_store_outage_backs_off_per_config_and_recovers(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(1)
    port = fs_stack.store.service.port
    scheduler = await fs_stack.start_scheduler(
        **{
            "remote.log.manager.task.retry.backoff.ms": "50",
            "remote.log.manager.task.retry.backoff.max.ms": "400",
            "remote.log.manager.task.retry.jitter": "0",
            "remote.log.manager.rpc.timeout.ms": "300",
        }
    )
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])
    await eventually(lambda: scheduler.tiered_to(tip, 29))
    schedule = scheduler.scheduler.schedules[Kind.COPY]
    delays = []
    finished = schedule.finished

    def recording_finished(key, *, failed):
        # Each failed run's delay as it is set: polling could miss one on a loaded machine.
        finished(key, failed=failed)
        if key == tip and failed:
            delays.append(schedule.last_delay(tip))

    schedule.finished = recording_finished
    await fs_stack.stop_store(0)

    broker.segments(1)
    await eventually(lambda: len(delays) >= 5, timeout_s=60)
    # Doubling from backoff.ms up to backoff.max.ms.
    assert delays[:5] == [0.05, 0.1, 0.2, 0.4, 0.4]
    state = await scheduler.state_of(tip)
    assert state.last_error_message
    assert state.highest_tiered_offset == 29

    await fs_stack.start_store(**{"listen.address": f"127.0.0.1:{port}"})

    async def recovered() -> bool:
        # The offset is recorded inside the run; the success resets the backoff as it ends.
        return await scheduler.tiered_to(tip, 59) and schedule.failures(tip) == 0

    await eventually(recovered, timeout_s=60)
    assert schedule.last_delay(tip) == 0.1  # back to remote.log.manager.task.interval.ms

    async def cleaned():
        segments = await fs_stack.segments(tip)
        return [(s.start_offset, s.state) for s in segments] == [(0, FINISHED), (30, FINISHED)]

    # The copies the outage interrupted are deleted by the expiration task.
    await eventually(cleaned, timeout_s=60)
    assert (await scheduler.state_of(tip)).last_error_message == ""


async def test_two_instances_over_the_same_partitions_copy_each_segment_once(
    fs_stack, tmp_path, redis_url
):
    partitions = [new_partition("shared", p) for p in range(3)]
    brokers = [Broker(tmp_path / "broker-0", tip) for tip in partitions]
    settings = {"redis.url": redis_url, "remote.log.manager.task.interval.ms": "20"}
    first = await fs_stack.start_scheduler("first", **settings)
    second = await fs_stack.start_scheduler("second", **settings)
    for instance in (first, second):
        await instance.client.on_partition_leadership_changes([b.assignment() for b in brokers])
    for round_ in range(1, 5):
        for broker in brokers:
            broker.segments(1)
        for tip in partitions:

            async def caught_up(tip=tip, count=round_):
                segments = await fs_stack.segments(tip)
                return len(segments) >= count and all(s.state is FINISHED for s in segments)

            await eventually(caught_up)

    for tip in partitions:
        segments = await fs_stack.segments(tip)
        assert [(s.start_offset, s.end_offset) for s in segments] == [
            (0, 29),
            (30, 59),
            (60, 89),
            (90, 119),
        ]
    # Both instances ran copy tasks; the leases kept them from copying the same segment.
    assert first.scheduler.runs[Kind.COPY] > 0
    assert second.scheduler.runs[Kind.COPY] > 0
