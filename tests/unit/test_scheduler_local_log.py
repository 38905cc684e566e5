"""The sidecar's view of a broker-written partition directory, and the copy quota."""

import asyncio
import os
import time
import uuid

import pytest

from remotelog.core.quota import ByteRateQuota
from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.kafka.state_files import write_hw_checkpoint
from remotelog.scheduler import local_log
from remotelog.scheduler.local_log import HighWatermarkCheckpoints, LocalLog, largest_timestamp

TOPIC_ID = uuid.UUID(int=11)


def write_log(tmp_path, batches=6, per_segment=2):
    log = PartitionLog.create(tmp_path, "orders", 0, TOPIC_ID, LogConfig(segment_bytes=1 << 30))
    for i in range(batches):
        if i and i % per_segment == 0:
            log.roll()
        log.append([(b"k", b"v" * 10)] * 5, leader_epoch=i // 3, timestamp_ms=1000 + i)
    return log


def test_scan_lists_segments_epochs_and_sizes(tmp_path):
    log = write_log(tmp_path)
    local = LocalLog.scan(log.directory)
    assert [(s.base_offset, s.next_offset) for s in local.segments] == [
        (0, 10),
        (10, 20),
        (20, None),
    ]
    assert [s.size for s in local.segments] == [s.size for s in log.segments]
    assert local.leader_epochs == ((0, 0), (1, 15))
    assert local.local_log_start_offset == 0
    assert local.rolled[1].end_offset == 19
    assert largest_timestamp(local.segments[1]) == 1003
    assert local.end_state() == (30, 30)
    assert local.producer_snapshot(10) is not None


def test_the_high_watermark_and_open_transactions_bound_the_last_stable_offset(tmp_path):
    log = write_log(tmp_path)
    log.set_high_watermark(25)
    assert LocalLog.scan(log.directory).end_state() == (30, 25)
    log.set_high_watermark(1000)
    log.append(
        [(b"k", b"t")] * 3, leader_epoch=1, producer_id=9, producer_epoch=0, transactional=True
    )
    log.roll()  # the open transaction is carried by the producer snapshot at 33
    log.append([(b"k", b"v")], leader_epoch=1)
    log.set_high_watermark(34)
    assert LocalLog.scan(log.directory).end_state() == (34, 30)
    log.append_marker(commit=True, producer_id=9, producer_epoch=0, leader_epoch=1)
    log.set_high_watermark(35)
    assert LocalLog.scan(log.directory).end_state() == (35, 35)


def count_parses(monkeypatch) -> list[int]:
    parses: list[int] = []
    real = local_log.read_hw_checkpoint

    def counting(path):
        parses.append(1)
        return real(path)

    monkeypatch.setattr(local_log, "read_hw_checkpoint", counting)
    return parses


def write_checkpoint(path, entries, *, age_s: float) -> None:
    write_hw_checkpoint(path, entries)
    stamp = time.time_ns() - int(age_s * 1e9)
    os.utime(path, ns=(stamp, stamp))


def test_the_high_watermark_checkpoint_is_parsed_once_per_version(tmp_path, monkeypatch):
    parses = count_parses(monkeypatch)
    checkpoints = HighWatermarkCheckpoints()
    path = tmp_path / "replication-offset-checkpoint"
    assert checkpoints.read(path) == {}  # no file yet: no high watermarks

    entries = {("orders", p): 100 + p for p in range(1000)}
    write_checkpoint(path, entries, age_s=10)
    for _ in range(5):
        assert checkpoints.read(path) == entries
    assert len(parses) == 1

    # The broker's next checkpoint: same size, a later mtime, a new inode (renamed into place).
    entries[("orders", 7)] = 108
    write_checkpoint(path, entries, age_s=5)
    assert checkpoints.read(path)[("orders", 7)] == 108
    assert checkpoints.read(path)[("orders", 7)] == 108
    assert len(parses) == 2


def test_a_checkpoint_changed_within_a_timestamp_tick_is_read_again(tmp_path, monkeypatch):
    """As git treats its index: a file that may still change within the same mtime is not kept."""
    parses = count_parses(monkeypatch)
    checkpoints = HighWatermarkCheckpoints()
    path = tmp_path / "replication-offset-checkpoint"
    write_checkpoint(path, {("orders", 0): 25}, age_s=0)
    assert checkpoints.read(path) == {("orders", 0): 25}
    stat = os.stat(path)
    # Rewritten in place, same size, and the same mtime (a coarse filesystem clock).
    path.write_text(path.read_text().replace("orders 0 25", "orders 0 26"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (os.stat(path).st_ino, os.stat(path).st_size) == (stat.st_ino, stat.st_size)
    assert checkpoints.read(path) == {("orders", 0): 26}
    assert len(parses) == 2


def test_delete_removes_a_rolled_segments_files_and_never_the_active_one(tmp_path):
    log = write_log(tmp_path)
    local = LocalLog.scan(log.directory)
    local.delete(local.segments[0])
    assert not (log.directory / "00000000000000000000.log").exists()
    assert not (log.directory / "00000000000000000000.index").exists()
    assert LocalLog.scan(log.directory).local_log_start_offset == 10
    with pytest.raises(ValueError, match="active segment"):
        local.delete(local.segments[-1])
    assert (log.directory / "00000000000000000020.log").exists()


def test_a_segment_deleted_after_the_scan_holds_the_stable_offset_below_it(tmp_path):
    """Local retention of a concurrent run (or the broker's) may delete a rolled
    segment between a scan and end_state: its end is known, its transactions not."""
    log = write_log(tmp_path)
    log.set_high_watermark(log.log_end_offset)
    for snapshot in log.directory.glob("*.snapshot"):
        snapshot.unlink()  # no producer snapshot: the transactions are read from offset 0
    local = LocalLog.scan(log.directory)
    local.segments[1].path(".log").unlink()
    assert local.end_state() == (30, 10)
    assert LocalLog.scan(log.directory).end_state() == (30, 30)  # the next scan: all stable
    # The scan's active segment, rolled, tiered and deleted since: no error either.
    local.segments[2].path(".log").unlink()
    assert local.end_state() == (20, 10)


def test_missing_directory_has_no_segments(tmp_path):
    local = LocalLog.scan(tmp_path / "gone-0")
    assert local.segments == ()
    assert local.end_state() == (0, 0)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_quota_throttles_above_the_rate_and_lets_the_first_copy_through():
    clock = Clock()
    quota = ByteRateQuota(1000, window_num=11, window_seconds=1, clock=clock)
    assert quota.throttle_seconds() == 0
    quota.record(20_000)  # one big segment goes at once: 20 kB over 10 s is 2 kB/s
    assert quota.throttle_seconds() == 10  # (2000 - 1000) / 1000 x 10 s
    clock.now += 11  # the sample ages out
    assert quota.throttle_seconds() == 0
    quota.record(500)
    assert quota.throttle_seconds() == 0  # 500 B over 10 s is under 1000 B/s


def test_quota_acquire_waits_until_the_rate_is_back_under_the_bound():
    async def scenario():
        quota = ByteRateQuota(10_000_000, window_num=2, window_seconds=0.05)
        await quota.acquire(2_000_000)
        await quota.acquire(1)
        return quota.throttled_seconds

    assert asyncio.run(scenario()) > 0
