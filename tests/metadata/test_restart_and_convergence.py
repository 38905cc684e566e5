"""Writers converge; a snapshot restart equals a full replay; bad snapshots are replayed."""

import asyncio
import itertools
import random
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from support.waiting import eventually

from remotelog.core.errors import InvalidStateTransitionError, MetadataNotReadyError
from remotelog.metadata import snapshot as snapshots
from remotelog.metadata import topic as topic_module
from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager

from .histories import answers, fresh_topic, partitions, until_ready, write_history
from .scenarios import COPIED, DELETING, Seg, metadata_of, update_of


async def written(started, name: str, *, segments: int, salt: str):
    """A fresh topic and a manager that wrote `segments` of history to each of two
    partitions: (topic, partitions, the manager, its answers about them)."""
    topic = fresh_topic()
    tips = partitions(2)
    writer = await started(name, topic)
    await until_ready(writer, tips)
    for number, tip in enumerate(tips):
        await write_history(writer, tip, random.Random(number), segments, salt)
    return topic, tips, writer, await answers(writer, tips)


async def test_two_instances_writing_interleaved_events_converge(started):
    topic = fresh_topic()
    first = await started("first", topic)
    second = await started("second", topic)
    tips = partitions(4)
    await until_ready(first, tips)
    await until_ready(second, tips)
    # Each instance writes its own segments of every partition, concurrently.
    await asyncio.gather(
        *(write_history(first, tip, random.Random(n), 8, "a") for n, tip in enumerate(tips)),
        *(write_history(second, tip, random.Random(-n), 8, "b") for n, tip in enumerate(tips)),
    )
    # A race on one segment: COPY_FINISHED from one, DELETE_STARTED from the other.
    contested = metadata_of(tips[0], Seg("race", 5000, 5010, {9: 5000}))
    await first.add_remote_log_segment_metadata(contested)
    await eventually(lambda: second.remote_log_segments(tips[0], 9), interval_s=0.01)
    outcomes = await asyncio.gather(
        first.update_remote_log_segment_metadata(update_of(contested, COPIED)),
        second.update_remote_log_segment_metadata(update_of(contested, DELETING)),
        return_exceptions=True,
    )
    # Either order is legal; if DELETE_STARTED won, the copy's event was dropped everywhere
    # and its writer was told so.
    assert outcomes[1] is None
    assert outcomes[0] is None or isinstance(outcomes[0], InvalidStateTransitionError)

    # The writers saw their own events applied; the other's may still be arriving.
    async def agree():
        return await answers(first, tips) == await answers(second, tips)

    await eventually(agree, timeout_s=60)
    final = await answers(first, tips)
    assert final == await answers(second, tips)
    assert first.remote_log_segments(tips[0], 9)[0].state is DELETING
    assert second.remote_log_segments(tips[0], 9)[0].state is DELETING
    assert sum(len(final[tip, "all"]) for tip in tips) > 40


async def test_restart_from_snapshot_answers_like_a_full_replay(started):
    topic = fresh_topic()
    tips = partitions(3)
    extra = {"remote.log.metadata.snapshot.interval.events": "40"}
    writer = await started("restarting", topic, **extra)
    await until_ready(writer, tips)
    for number, tip in enumerate(tips):
        await write_history(writer, tip, random.Random(number), 12, "s")
    before = await answers(writer, tips)
    await writer.close()  # writes a final snapshot

    # While it is down, another instance appends a tail.
    other = await started("other", topic)
    await until_ready(other, tips)
    tail = await write_history(other, tips[1], random.Random(99), 3, "t")
    await other.close()

    restarted = await started("restarting", topic, **extra)
    replayed = await started("replayed", topic)
    assert restarted.snapshot_status == "loaded"
    # The snapshot re-registered the partitions: they load without being asked.
    assert restarted.registered_partitions() == frozenset(tips)
    await until_ready(restarted, [])
    await until_ready(replayed, tips)
    assert restarted.events_applied == tail  # only the tail was consumed
    assert replayed.events_applied > tail
    after = await answers(restarted, tips)
    assert after == await answers(replayed, tips)
    assert after != before  # the tail is there
    assert len(after[tips[1], "all"]) > len(before[tips[1], "all"])


async def test_corrupt_snapshot_is_discarded_and_the_topic_replayed(started):
    topic, tips, writer, expected = await written(started, "corrupt", segments=6, salt="c")
    snapshot_path = await writer.write_snapshot()
    await writer.close()
    data = bytearray(snapshot_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    snapshot_path.write_bytes(bytes(data))

    restarted = await started("corrupt", topic)
    assert restarted.snapshot_status == "discarded: CRC mismatch (corrupt)"
    await until_ready(restarted, tips)
    assert await answers(restarted, tips) == expected


async def recreated(started, broker) -> TopicBasedRemoteLogMetadataManager:
    """A manager restarted on its topic deleted and created again, its snapshot (of the
    old topic id, with segments of one partition) discarded."""
    topic = fresh_topic()
    tips = partitions(1)
    writer = await started("recreated", topic)
    await until_ready(writer, tips)
    await write_history(writer, tips[0], random.Random(1), 4, "r")
    old_topic_id = writer.topic.topic_id
    await writer.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.delete_topics([topic])[topic].result()

    restarted = await started("recreated", topic)
    assert restarted.topic.topic_id != old_topic_id
    assert restarted.snapshot_status.startswith("discarded: it is of topic id")
    await until_ready(restarted, tips)
    assert restarted.remote_log_segments(tips[0]) == []
    return restarted


async def test_snapshot_of_a_deleted_and_recreated_topic_is_discarded(started, broker):
    assert (await recreated(started, broker)).snapshot_status.startswith("discarded")


async def test_partitions_a_lost_topic_held_are_not_ready_until_recovered(started, broker):
    restarted = await recreated(started, broker)
    tip = next(iter(restarted.registered_partitions()))
    # Served as empty and ready, a leader would move Kafka's log start offset past the
    # whole tiered history: neither ready nor written until a recovery has run.
    assert await restarted.is_ready(tip) is False
    with pytest.raises(
        MetadataNotReadyError, match=r"remote\.log\.metadata\.await\.recovery=false"
    ):
        await restarted.add_remote_log_segment_metadata(
            metadata_of(tip, Seg("new", 100, 109, {0: 100}))
        )
    await restarted.close()
    again = await started("recreated", restarted.topic_name)  # held across restarts
    await until_ready(again, [tip])
    assert await again.is_ready(tip) is False
    assert again.recovery_awaited == {tip: 1}

    async def nothing_missing():
        yield []

    await again.recoveries.recover_batches(tip, nothing_missing(), recovery="a test's")
    assert await again.is_ready(tip)
    await again.close()
    third = await started("recreated", again.topic_name)
    await until_ready(third, [tip])
    assert await third.is_ready(tip)


async def test_await_recovery_false_serves_what_a_lost_topic_held_at_once(started, broker):
    restarted = await recreated(started, broker)
    tip = next(iter(restarted.registered_partitions()))
    await restarted.close()
    going_on = await started(
        "recreated", restarted.topic_name, **{"remote.log.metadata.await.recovery": "false"}
    )
    await until_ready(going_on, [tip])
    assert await going_on.is_ready(tip)


async def snapshot_appears(manager) -> bool:
    path = Path(manager.config.snapshot_dir)

    def written() -> bool:
        loaded = snapshots.load(path)
        return loaded is not None and bool(loaded.states)

    return await eventually(written)


async def test_snapshots_are_written_every_n_events_and_every_t_ms(started):
    topic = fresh_topic()
    by_count = await started(
        "by-count",
        topic,
        **{
            "remote.log.metadata.snapshot.interval.events": "4",
            "remote.log.metadata.snapshot.interval.ms": "3600000",
        },
    )
    by_time = await started(
        "by-time",
        topic,
        **{
            "remote.log.metadata.snapshot.interval.events": "1000000",
            "remote.log.metadata.snapshot.interval.ms": "200",
        },
    )
    tips = partitions(1)
    await until_ready(by_count, tips)
    await until_ready(by_time, tips)
    assert snapshots.load(Path(by_count.config.snapshot_dir)) is None
    await write_history(by_count, tips[0], random.Random(3), 2, "n")  # >= 4 events
    # Neither manager was closed: the snapshots come from the schedule.
    assert await snapshot_appears(by_count)
    assert await snapshot_appears(by_time)
    loaded = snapshots.load(Path(by_time.config.snapshot_dir))
    assert loaded.registered == frozenset(tips)


async def test_a_failing_consumer_thread_starts_over_and_loses_nothing(
    started, monkeypatch, caplog
):
    topic, tips, writer, expected = await written(started, "writer", segments=10, salt="f")

    # The third record the replaying consumer parses raises: its thread fails mid-replay.
    parse = topic_module._parse
    parsed = itertools.count()

    def failing_once(message):
        if next(parsed) == 2:
            raise RuntimeError("injected consumer failure")
        return parse(message)

    monkeypatch.setattr(topic_module, "_parse", failing_once)
    replayed = await started("replayed-after-failure", topic)
    await until_ready(replayed, tips)
    assert await answers(replayed, tips) == expected
    assert replayed.events_applied == writer.events_applied
    assert "metadata consumer failed; restarting it" in caplog.text
