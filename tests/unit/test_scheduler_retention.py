"""Retention decisions (local and remote) on hand-built logs and remote segment lists."""

import uuid
from pathlib import Path

from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.local_log import LocalLog, LocalSegment
from remotelog.scheduler.partition import Assignment, PartitionRuntime, Retention, Role, TaskContext
from remotelog.scheduler.retention import local_deletable, may_delete_locally, plan_expiration

TIP = TopicIdPartition(uuid.UUID(int=7), "orders", 0)
NOW = 1_700_000_000_000
DAY = 86_400_000
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETING = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


def local_log(bounds, epochs=((0, 0),), size=100):
    """Segments [(base, next)], the last one active."""
    directory = Path("/nonexistent")
    segments = tuple(LocalSegment(directory, base, size, nxt) for base, nxt in bounds)
    return LocalLog(directory, segments, tuple(epochs), None)


def remote(start, end, *, max_ts=NOW, epochs=((0, 0),), state=FINISHED, event=NOW, size=100):
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, uuid.uuid4()),
        start,
        end,
        max_ts,
        0,
        event,
        size,
        tuple((e, max(o, start)) for e, o in epochs),
        state=state,
    )


def runtime(highest=-1, log_start=0):
    return PartitionRuntime(
        Assignment(TIP, Path("/nonexistent"), 0, Role.LEADER),
        highest_tiered_offset=highest,
        log_start_offset=log_start,
    )


def retention(ms=-1, size=-1, local_ms=-1, local_bytes=-1):
    return Retention(ms, size, local_ms, local_bytes)


def plan(segments, local, rt, ret, grace=60_000):
    doomed, start = plan_expiration(segments, local, rt, ret, 1000, NOW, grace)
    return [(s.start_offset, s.end_offset) for s in doomed], start


LOCAL = local_log([(300, None)])


def test_time_retention_deletes_the_old_prefix_and_moves_the_log_start():
    segments = [
        remote(0, 99, max_ts=NOW - 3 * DAY),
        remote(100, 199, max_ts=NOW - 2 * DAY),
        remote(200, 299, max_ts=NOW),
    ]
    assert plan(segments, LOCAL, runtime(299), retention(ms=DAY)) == ([(0, 99), (100, 199)], 200)


def test_size_retention_counts_remote_and_local_only_bytes():
    segments = [remote(0, 99), remote(100, 199), remote(200, 299)]
    # 300 remote + 100 local-only bytes against 250: 150 over -> only one 100-byte segment fits.
    assert plan(segments, LOCAL, runtime(299), retention(size=250)) == ([(0, 99)], 100)


def test_a_copy_finished_since_the_highest_tiered_offset_moved_is_counted_once():
    """The listing already shows the last copy finished; the partition's highest tiered
    offset has not caught up yet. Its bytes are remote, not local-only as well."""
    segments = [remote(0, 99), remote(100, 199), remote(200, 299)]
    local = local_log([(200, 300), (300, None)])
    # 300 remote + the active segment's 100 against 300: one segment over, not two.
    assert plan(segments, local, runtime(199), retention(size=300)) == ([(0, 99)], 100)


def test_log_start_offset_breach_deletes_segments_wholly_below_it():
    segments = [remote(0, 99), remote(100, 199), remote(200, 299)]
    assert plan(segments, LOCAL, runtime(299, log_start=150), retention()) == ([(0, 99)], None)


def test_the_first_kept_segment_stops_the_walk():
    segments = [
        remote(0, 99, max_ts=NOW),
        remote(100, 199, max_ts=NOW - 3 * DAY),  # old but behind a kept segment
    ]
    assert plan(segments, LOCAL, runtime(199), retention(ms=DAY)) == ([], None)


def test_segments_of_epochs_before_the_lineage_are_unreferenced_and_deleted():
    local = local_log([(300, None)], epochs=((3, 0),))
    segments = [remote(0, 99, epochs=((1, 0),)), remote(100, 199, epochs=((3, 100),))]
    assert plan(segments, local, runtime(199), retention()) == ([(0, 99)], None)


def test_dangling_copies_wait_for_the_grace_and_failed_deletes_are_retried_at_once():
    segments = [
        remote(0, 99, state=DELETING, event=NOW),
        remote(100, 199, state=STARTED, event=NOW - 120_000),  # crashed long ago
        remote(200, 299, state=STARTED, event=NOW - 1_000, max_ts=0),  # maybe still copying
        remote(300, 399, max_ts=0),
    ]
    doomed, start = plan(segments, local_log([(400, None)]), runtime(99), retention(ms=DAY))
    assert doomed == [(0, 99), (100, 199)]
    assert start is None  # the young copy stops the walk before the expired (300, 399)


def test_a_segment_being_copied_here_is_never_touched():
    rt = runtime(99)
    segment = remote(100, 199, state=STARTED, event=0, max_ts=0)
    rt.segments_being_copied.add(segment.remote_log_segment_id.id)
    assert plan([segment], LOCAL, rt, retention(ms=DAY)) == ([], None)


def stamp(ts):
    return lambda segment: ts[segment.base_offset]


def test_local_retention_deletes_only_tiered_rolled_segments():
    local = local_log([(0, 100), (100, 200), (200, 300), (300, None)])
    old = stamp({0: 0, 100: 0, 200: 0, 300: 0})
    # Everything is old, but only the first two are tiered; the active one never goes.
    assert local_deletable(local, runtime(199), retention(local_ms=1), NOW, old) == [0, 100]
    assert local_deletable(local, runtime(-1), retention(local_ms=1), NOW, old) == []
    assert local_deletable(local, runtime(10_000), retention(local_ms=1), NOW, old) == [0, 100, 200]


def test_local_retention_by_size_and_by_log_start():
    local = local_log([(0, 100), (100, 200), (200, 300), (300, None)])
    new = stamp({0: NOW, 100: NOW, 200: NOW, 300: NOW})
    # 400 bytes against 250: one segment goes (300 left), a second would leave 200 < 250.
    assert local_deletable(local, runtime(299), retention(local_bytes=250), NOW, new) == [0]
    # Below the log start offset (DeleteRecords): deleted whether tiered or not.
    assert local_deletable(local, runtime(-1, log_start=150), retention(), NOW, new) == [0]


def test_the_idle_check_agrees_with_local_retention_and_reads_no_file():
    """may_delete_locally: what local_deletable would say of the oldest segment, in memory."""
    local = local_log([(0, 100), (100, 200), (200, None)])

    def may(rt, *, local_ms=-1, local_bytes=-1):
        rt.assignment = Assignment(
            TIP,
            Path("/nonexistent"),
            0,
            Role.LEADER,
            local_retention_ms=local_ms,
            local_retention_bytes=local_bytes,
        )
        ctx = TaskContext(
            CopySchedulerConfig(local_retention_enabled=True),
            None,
            None,
            None,
            clock=lambda: NOW / 1000,
        )
        return may_delete_locally(local, rt, ctx)

    # Tiered, but local retention is unlimited: nothing to do (it used to take the lease).
    assert not may(runtime(199))
    assert not may(runtime(-1), local_ms=1)  # nothing tiered
    assert may(runtime(-1, log_start=150))  # below the log start
    assert may(runtime(199), local_bytes=150)  # 300 bytes on disk against 150
    assert not may(runtime(199), local_bytes=250)
    # By time: a timestamp not read yet means maybe; once read, it decides.
    rt = runtime(199)
    assert may(rt, local_ms=DAY)
    rt.timestamps[(0, 100)] = NOW - 2 * DAY
    assert may(rt, local_ms=DAY)
    rt.timestamps[(0, 100)] = NOW - 1000
    assert not may(rt, local_ms=DAY)
