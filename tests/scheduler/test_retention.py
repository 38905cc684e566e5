"""Remote retention (RLMExpirationTask) and partition stop against real services."""

import logging
import time

from support.services import new_partition
from support.waiting import eventually

from .conftest import Broker

DAY_MS = 86_400_000


async def offsets(stack, tip):
    return [(s.start_offset, s.end_offset) for s in await stack.segments(tip)]


async def test_delete_by_retention_size(stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(4)
    sizes = [s.size for s in broker.log.segments]
    # Remote holds all four; the local-only bytes are the (empty) active segment.
    keep = sum(sizes) - sizes[0] - sizes[1]
    scheduler = await stack.start_scheduler()
    await scheduler.client.on_partition_leadership_changes(
        [broker.assignment(retention_bytes=keep, local_retention_bytes=-1)]
    )

    async def trimmed():
        # The last copy may still be in progress when the first two are deleted.
        expected = [(60, 89), (90, 119)]
        return await offsets(stack, tip) == expected and await scheduler.tiered_to(tip, 119)

    await eventually(trimmed)
    state = await scheduler.client.partition_state(tip)
    assert state.log_start_offset == 60
    assert state.highest_tiered_offset == 119
    remote = await stack.remote_records(tip)
    assert sorted(remote) == list(range(60, 120))


async def test_delete_by_retention_time(stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    old = int(time.time() * 1000) - 2 * DAY_MS
    broker.segments(2, timestamp_ms=old)
    broker.segments(2)
    scheduler = await stack.start_scheduler()
    await scheduler.client.on_partition_leadership_changes(
        [broker.assignment(retention_ms=DAY_MS, local_retention_ms=-1)]
    )

    async def expired():
        return await offsets(stack, tip) == [(60, 89), (90, 119)]

    await eventually(expired)
    assert (await scheduler.client.partition_state(tip)).log_start_offset == 60
    # Local retention is unlimited here, but what expired is below the log start now.
    await eventually(lambda: not (broker.directory / "00000000000000000000.log").exists())


async def test_old_data_tiered_only_to_expire_is_warned_of_and_the_retention_shown(
    fs_stack, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="remotelog")
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(3, timestamp_ms=int(time.time() * 1000) - 10 * DAY_MS)
    broker.segments(1)
    scheduler = await fs_stack.start_scheduler()
    await scheduler.client.on_partition_leadership_changes(
        [broker.assignment(retention_ms=7 * DAY_MS, local_retention_ms=-1)]
    )
    await eventually(lambda: scheduler.tiered_to(tip, 119))
    state = await scheduler.client.partition_state(tip)
    assert (state.effective_retention_ms, state.effective_local_retention_ms) == (7 * DAY_MS, -1)
    # Bytes: the scheduler's defaults, local's -2 resolved to the retention's.
    assert state.effective_retention_bytes == -1
    assert state.effective_local_retention_bytes == -1
    assert (
        f"{tip}: 3 of the 4 segments just tiered are older than its retention.ms={7 * DAY_MS}; "
        "the expiration task will delete them from the remote tier. To keep them, assign the "
        "topic's retention_ms (or set log.retention.ms; -1 keeps all)"
    ) in caplog.messages


async def test_delete_after_a_log_start_offset_breach(fs_stack, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="remotelog")
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(3)
    scheduler = await fs_stack.start_scheduler()
    client = scheduler.client
    await client.on_partition_leadership_changes([broker.assignment(local_retention_ms=-1)])
    await eventually(lambda: scheduler.tiered_to(tip, 89))

    await client.update_log_start_offset(tip, 45)  # DeleteRecords up to 45

    async def breached():
        return await offsets(fs_stack, tip) == [(30, 59), (60, 89)]

    await eventually(breached)
    await eventually(lambda: not (broker.directory / "00000000000000000000.log").exists())
    state = await client.partition_state(tip)
    assert state.log_start_offset == 45
    assert state.local_log_start_offset == 30
    assert (broker.directory / "00000000000000000030.log").exists()
    # What an operator reads: the leadership taken, each segment tiered, the deletion.
    assert f"leader of {tip} at leader epoch 0, log dir {broker.directory}" in caplog.messages
    assert any(m.startswith(f"tiered {tip} offsets 0-29 (") for m in caplog.messages)
    assert any(
        m.startswith(f"retention deleted 1 remote segments of {tip} (")
        and m.endswith("offsets 0-29); log start offset 45")
        for m in caplog.messages
    ), caplog.messages


async def test_stop_partitions_deletes_the_remote_log_when_asked(stack, tmp_path):
    kept, deleted = new_partition("kept"), new_partition("gone")
    brokers = [Broker(tmp_path / "broker-0", tip) for tip in (kept, deleted)]
    for broker in brokers:
        broker.segments(2)
    scheduler = await stack.start_scheduler()
    await scheduler.client.on_partition_leadership_changes([b.assignment() for b in brokers])
    for tip in (kept, deleted):
        await eventually(lambda tip=tip: scheduler.tiered_to(tip, 59))
    before = stack.store.objects()

    await scheduler.client.stop_partitions([deleted], delete_remote_log=True)
    await scheduler.client.stop_partitions([kept])

    assert await stack.segments(deleted) == []
    assert await offsets(stack, kept) == [(0, 29), (30, 59)]
    after = stack.store.objects()
    assert len(after) == len(before) / 2
    assert not any("gone-" in key for key in after)
    assert scheduler.scheduler.partitions == {}
