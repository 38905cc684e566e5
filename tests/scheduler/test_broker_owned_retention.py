"""Beside a running Kafka broker: the scheduler only reads the log directory, and a
segment the broker deletes under it (renamed to .deleted, then unlinked) is skipped
before anything is written, or copied whole once the copy has it open."""

import itertools
import time
from pathlib import Path

from support.services import new_partition
from support.telemetry import counter
from support.waiting import eventually

from remotelog.core import metrics as m
from remotelog.core.model import kafka_uuid_str
from remotelog.scheduler import copy_task

from .conftest import FINISHED, Broker

HOUR_MS = 3_600_000
BROKER_OWNED = {"remote.log.manager.local.retention.enabled": "false"}


def files_of(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Every file of the log dir (the partition's and the checkpoints beside it)."""
    return {
        str(path.relative_to(directory.parent)): (
            path.stat().st_ino,
            path.stat().st_mtime_ns,
            path.stat().st_size,
        )
        for path in sorted(directory.parent.rglob("*"))
        if path.is_file()
    }


def delete_the_kafka_way(base: Path) -> None:
    """What Kafka's log cleaner does to a segment: every file renamed to .deleted, then
    (file.delete.delay.ms later) unlinked."""
    for path in base.parent.glob(f"{base.name}.*"):
        if not path.name.endswith(".deleted"):
            renamed = path.with_name(path.name + ".deleted")
            path.rename(renamed)
            renamed.unlink()


async def test_tiered_segments_stay_where_the_broker_keeps_them(fs_stack, tmp_path):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(3)
    before = files_of(broker.directory)
    scheduler = await fs_stack.start_scheduler(**BROKER_OWNED)
    # Local retention 0 bytes would delete every tiered segment, were it the scheduler's.
    await scheduler.client.on_partition_leadership_changes(
        [broker.assignment(local_retention_bytes=0, local_retention_ms=0)]
    )
    await eventually(lambda: scheduler.tiered_to(tip, broker.rolled_end))
    # Two more runs of the partition's task (each schedules the next when it ends).
    for _ in range(2):
        ran_at = (await scheduler.state_of(tip)).next_run_time_ms

        async def ran_again(ran_at=ran_at):
            return (await scheduler.state_of(tip)).next_run_time_ms > ran_at

        await eventually(ran_again)
    state = await scheduler.state_of(tip)
    assert state.local_log_start_offset == 0
    # Nothing was deleted, written or replaced: same inode, mtime and size of every file.
    assert files_of(broker.directory) == before


async def test_a_segment_the_broker_deletes_is_skipped_or_copied_whole(
    fs_stack, tmp_path, monkeypatch, telemetry, caplog
):
    reader, _ = telemetry
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(4)
    bases = [s.base_offset for s in broker.log.segments[:-1]]
    gone_before, gone_during = bases[1], bases[2]
    opened = copy_task.held_open

    def racing_broker(segment):
        # Segment 1 is deleted after the scan, before its copy opens it; segment 2
        # right after its copy opened it.
        if segment.base_offset == gone_before:
            delete_the_kafka_way(segment.path(""))
        if segment.base_offset == gone_during:
            return _ThenDeleted(opened(segment), segment)
        return opened(segment)

    monkeypatch.setattr(copy_task, "held_open", racing_broker)
    written = dict(broker.records)
    scheduler = await fs_stack.start_scheduler(**BROKER_OWNED)
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])
    await eventually(lambda: scheduler.tiered_to(tip, broker.rolled_end))

    finished = await fs_stack.segments(tip, {FINISHED})
    segments = broker.log.segments
    ends = {s.base_offset: after.base_offset - 1 for s, after in itertools.pairwise(segments)}
    assert [(s.start_offset, s.end_offset) for s in finished] == [
        (base, ends[base]) for base in bases if base != gone_before
    ]
    # What was tiered is what was written, the segment deleted during its copy included.
    remote = await fs_stack.remote_records(tip)
    assert remote == {o: r for o, r in written.items() if not gone_before <= o <= ends[gone_before]}
    # No orphan: only the finished segments' objects are in the store.
    ids = {kafka_uuid_str(s.remote_log_segment_id.id) for s in finished}
    objects = fs_stack.objects_of(tip)
    assert objects
    assert all(any(i in key for i in ids) for key in objects)
    assert counter(reader, m.SEGMENTS_DELETED_BEFORE_TIERING.name, tip.topic) == 1
    assert any(
        f"offsets {gone_before}-{ends[gone_before]} were deleted by the broker" in m
        for m in caplog.messages
    )
    state = await scheduler.state_of(tip)
    assert state.last_error_message == ""
    assert state.segments_deleted_before_tiering == 1


async def test_copy_lag_in_ms_is_the_age_of_the_oldest_segment_waiting(fs_stack, tmp_path):
    """GetPartitionState's copy_lag_ms, to hold against the broker's local retention."""
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    hour_ago = int(time.time() * 1000) - HOUR_MS
    broker.segments(1, timestamp_ms=hour_ago - HOUR_MS)
    broker.segments(2, timestamp_ms=hour_ago)
    first_end = broker.log.segments[1].base_offset - 1
    # Only the first segment is below the high watermark: the next two wait.
    broker.log.set_high_watermark(first_end + 1)
    scheduler = await fs_stack.start_scheduler(**BROKER_OWNED)
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])
    await eventually(lambda: scheduler.tiered_to(tip, first_end))

    async def waiting_an_hour():
        state = await scheduler.state_of(tip)
        return state.copy_lag_segments == 2 and state.copy_lag_ms >= HOUR_MS

    await eventually(waiting_an_hour)
    state = await scheduler.state_of(tip)
    assert state.copy_lag_ms < 2 * HOUR_MS  # the second segment's age, not the first's
    assert state.segments_deleted_before_tiering == 0
    broker.log.set_high_watermark(broker.log.log_end_offset)
    await eventually(lambda: scheduler.tiered_to(tip, broker.rolled_end))

    async def none_waiting():
        return (await scheduler.state_of(tip)).copy_lag_ms == 0

    await eventually(none_waiting)


class _ThenDeleted:
    """held_open's context, with the segment deleted the Kafka way once it is open."""

    def __init__(self, context, segment):
        self.context, self.segment = context, segment

    def __enter__(self):
        files = self.context.__enter__()
        delete_the_kafka_way(self.segment.path(""))
        assert not self.segment.path(".log").exists()
        return files

    def __exit__(self, *exc_info):
        return self.context.__exit__(*exc_info)
