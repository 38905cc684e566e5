"""Retention: local (UnifiedLog's tiered-aware deletion) and remote (RLMExpirationTask).

Local: the oldest rolled segments go while they are tiered and beyond
`local.retention.ms` / `local.retention.bytes`, or wholly below the log start
offset; never the active segment, never a segment that is not tiered.

Remote, for leaders, as Kafka does it: walk the current (filtered) leader-epoch
lineage oldest first and mark segments breached by the log start offset, by
`retention.ms` (largest timestamp) or by `retention.bytes` (remote bytes in the
lineage + bytes only on disk), stopping at the first segment that is kept;
publish the new log start offset; then delete them. Segments whose epochs all
predate the lineage (an unclean election's leftovers) are deleted too, and
COPY/DELETE_SEGMENT_STARTED left by a crashed run are deleted once older than
`remote.log.manager.dangling.segment.grace.ms`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from remotelog.core.epochs import entries_in_range, filtered, within_lineage
from remotelog.core.model import RemoteLogSegmentMetadata
from remotelog.core.states import RemoteLogSegmentState
from remotelog.scheduler.local_log import LocalLog, LocalSegment
from remotelog.scheduler.partition import PartitionRuntime, Retention, TaskContext
from remotelog.scheduler.remote_delete import delete_remote_segment

log = logging.getLogger(__name__)

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETING = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED

# Expiration runs one listing of a partition's remote segments serves at most.
LISTING_MAX_USES = 10


def _local_segment_goes(
    segment: LocalSegment,
    remaining: int,
    runtime: PartitionRuntime,
    retention: Retention,
    now_ms: int,
    largest_timestamp: Callable[[LocalSegment], int | None],
) -> bool:
    """Local retention's test of one rolled segment; an unknown (None) timestamp counts as old."""
    if segment.end_offset < (runtime.log_start_offset or 0):
        return True
    if segment.end_offset > runtime.highest_tiered_offset:
        return False  # never untiered data
    if retention.local_retention_bytes > -1 and (
        remaining - segment.size >= retention.local_retention_bytes
    ):
        return True
    if retention.local_retention_ms > -1:
        timestamp = largest_timestamp(segment)
        return timestamp is None or now_ms - timestamp > retention.local_retention_ms
    return False


def local_deletable(
    local: LocalLog,
    runtime: PartitionRuntime,
    retention: Retention,
    now_ms: int,
    largest_timestamp: Callable[[LocalSegment], int],
) -> list[int]:
    """Base offsets of the local segments to delete now: always a prefix of the rolled ones."""
    remaining = local.size
    deletable: list[int] = []
    for segment in local.rolled:
        if not _local_segment_goes(
            segment, remaining, runtime, retention, now_ms, largest_timestamp
        ):
            break
        deletable.append(segment.base_offset)
        remaining -= segment.size
    return deletable


def may_delete_locally(local: LocalLog, runtime: PartitionRuntime, ctx: TaskContext) -> bool:
    """Whether local retention may take the oldest rolled segment; if it stays, all do.

    Decided in memory (a segment's largest timestamp once read is kept), so
    that idle partitions read no file: an unread timestamp means maybe.
    """
    if not local.rolled or not ctx.config.local_retention_enabled:
        return False
    return _local_segment_goes(
        local.rolled[0],
        local.size,
        runtime,
        Retention.of(runtime.assignment, ctx.config),
        ctx.now_ms(),
        runtime.known_largest_timestamp,
    )


async def run_local_retention(ctx: TaskContext, runtime: PartitionRuntime, local: LocalLog) -> int:
    """Delete what local retention allows; returns how many segments went."""
    if not may_delete_locally(local, runtime, ctx):
        return 0  # no file to read (the common case)
    retention = Retention.of(runtime.assignment, ctx.config)
    bases = await asyncio.to_thread(
        local_deletable, local, runtime, retention, ctx.now_ms(), runtime.largest_timestamp
    )
    doomed = [s for s in local.rolled if s.base_offset in set(bases)]
    for segment in doomed:
        await asyncio.to_thread(local.delete, segment)
        log.info("deleted local segment %s (tiered or below the log start)", segment.path(".log"))
    if doomed:
        runtime.local_log_start_offset = doomed[-1].next_offset or runtime.local_log_start_offset
    return len(doomed)


class _Breaches:
    """RemoteLogRetentionHandler: size and time breaches, and the log start they imply."""

    def __init__(self, retention: Retention, now_ms: int, breached_bytes: int) -> None:
        self.cleanup_until_ms = (
            now_ms - retention.retention_ms
            if retention.retention_ms > -1 and now_ms - retention.retention_ms >= 0
            else None
        )
        self.remaining_bytes = breached_bytes
        self.log_start_offset: int | None = None

    def _moved(self, segment: RemoteLogSegmentMetadata) -> None:
        if self.log_start_offset is None or self.log_start_offset < segment.end_offset + 1:
            self.log_start_offset = segment.end_offset + 1

    def by_time(self, segment: RemoteLogSegmentMetadata) -> bool:
        if self.cleanup_until_ms is None or segment.max_timestamp_ms > self.cleanup_until_ms:
            return False
        self.remaining_bytes = max(0, self.remaining_bytes - segment.segment_size_in_bytes)
        self._moved(segment)
        return True

    def by_size(self, segment: RemoteLogSegmentMetadata) -> bool:
        if self.remaining_bytes <= 0 or self.remaining_bytes < segment.segment_size_in_bytes:
            return False
        self.remaining_bytes -= segment.segment_size_in_bytes
        self._moved(segment)
        return True


def plan_expiration(
    segments: list[RemoteLogSegmentMetadata],
    local: LocalLog,
    runtime: PartitionRuntime,
    retention: Retention,
    log_end_offset: int,
    now_ms: int,
    grace_ms: int,
) -> tuple[list[RemoteLogSegmentMetadata], int | None]:
    """(segments to delete in order, new log start offset) — no I/O, so it is testable alone."""
    log_start = runtime.log_start_offset or 0
    # The broker truncates its checkpoint from the start when the log start moves;
    # seen from beside it the file may lag, so the view is truncated here too.
    lineage = filtered(entries_in_range(local.leader_epochs, log_start, 2**63 - 1))
    doomed: dict[object, RemoteLogSegmentMetadata] = {}
    skip: set[object] = set()

    for segment in segments:
        key = segment.remote_log_segment_id
        if segment.remote_log_segment_id.id in runtime.segments_being_copied:
            skip.add(key)
        elif segment.state is DELETING:
            doomed[key] = segment  # a failed or interrupted delete: retried at once, as Kafka does
        elif segment.state is STARTED:
            if now_ms - segment.event_timestamp_ms >= grace_ms:
                doomed[key] = segment  # left by a crashed run
            else:
                skip.add(key)  # possibly still being copied elsewhere: wait for the grace
    if not lineage:
        return list(doomed.values()), None

    breached = 0
    if retention.retention_bytes > -1:
        counted = [
            s
            for s in segments
            if s.state is FINISHED
            and within_lineage(s.segment_leader_epochs, s.end_offset, log_end_offset, lineage)
        ]
        remote = sum(s.segment_size_in_bytes for s in counted)
        # A copy the listing shows finished may not have moved the highest tiered offset
        # yet: its bytes are remote now, not local-only as well.
        tiered = max([runtime.highest_tiered_offset, *(s.end_offset for s in counted)])
        total = local.size_above(tiered) + remote
        breached = max(0, total - retention.retention_bytes)
    breaches = _Breaches(retention, now_ms, breached)

    first_epoch = lineage[0][0]
    can_process = True
    for epoch, _ in lineage:
        if not can_process:
            break
        for segment in sorted(
            (s for s in segments if epoch in dict(s.segment_leader_epochs)),
            key=lambda s: (s.start_offset, str(s.remote_log_segment_id.id)),
        ):
            key = segment.remote_log_segment_id
            if key in skip:
                can_process = False
                break
            if segment.state is DELETED or key in doomed:
                continue
            delete = (
                all(e <= first_epoch for e, _ in segment.segment_leader_epochs)
                and segment.end_offset < log_start
            )
            valid = False
            if not delete:
                valid = within_lineage(
                    segment.segment_leader_epochs, segment.end_offset, log_end_offset, lineage
                )
                delete = valid and (breaches.by_time(segment) or breaches.by_size(segment))
            if delete:
                doomed[key] = segment
            can_process = delete or not valid
            if not can_process:
                break

    # Unreferenced: every epoch of the segment predates the lineage.
    for segment in segments:
        epochs = [e for e, _ in segment.segment_leader_epochs]
        if segment.state is not DELETED and epochs and max(epochs) < first_epoch:
            doomed.setdefault(segment.remote_log_segment_id, segment)
    return list(doomed.values()), breaches.log_start_offset


def kept_remote_segments(runtime: PartitionRuntime) -> list[RemoteLogSegmentMetadata] | None:
    """The listing an earlier run kept, counted as one more use; None when it must be renewed."""
    if runtime.remote_segments is None or runtime.remote_segments_uses >= LISTING_MAX_USES:
        return None
    runtime.remote_segments_uses += 1
    return runtime.remote_segments


async def remote_segments(
    ctx: TaskContext, runtime: PartitionRuntime, *, fresh: bool = False
) -> list[RemoteLogSegmentMetadata]:
    """The partition's live remote segments (and RemoteLogSizeBytes from them).

    An idle partition's segments rarely change, and listing them is a call to
    the metadata manager per partition per interval (10,000 partitions: most
    of both services' CPU). So a listing is kept for up to LISTING_MAX_USES
    runs, or until this instance writes the partition's metadata or sees that
    another instance copied. A kept listing only ever decides that nothing is
    deleted: deletions are planned from a new one, under the lease.
    """
    started = time.monotonic()
    live = None if fresh else kept_remote_segments(runtime)
    if live is None:
        generation = runtime.remote_segments_generation
        listing = ctx.metadata.list_remote_log_segments(runtime.tip, timeout_s=ctx.timeout_s)
        live = [s async for s in listing if s.state is not DELETED]
        if runtime.remote_segments_generation == generation:  # no write of ours while listing
            runtime.remote_segments, runtime.remote_segments_uses = live, 1
    runtime.remote_log_size_bytes = sum(s.segment_size_in_bytes for s in live)
    # KIP-963: what working out the size took (a listing, or a kept one) and over how many.
    runtime.remote_log_size_computation_ms = (time.monotonic() - started) * 1000
    runtime.remote_log_metadata_count = len(live)
    return live


async def _plan(
    ctx: TaskContext,
    runtime: PartitionRuntime,
    local: LocalLog,
    live: list[RemoteLogSegmentMetadata],
) -> tuple[list[RemoteLogSegmentMetadata], int | None]:
    if not live:
        return [], None
    # The log end only decides whether a segment ends below it: the active
    # segment's base does for every segment below it, without reading the log.
    log_end = local.segments[-1].base_offset if local.segments else 0
    if any(s.end_offset >= log_end for s in live):
        log_end, _ = await asyncio.to_thread(local.end_state)
    return plan_expiration(
        live,
        local,
        runtime,
        Retention.of(runtime.assignment, ctx.config),
        log_end,
        ctx.now_ms(),
        ctx.config.dangling_segment_grace_ms,
    )


async def expiration_due(ctx: TaskContext, runtime: PartitionRuntime, local: LocalLog) -> bool:
    """Whether an expiration run would delete anything, judged from a kept listing if any.

    Needs no lease (it writes nothing), so the runs of idle partitions take none.
    """
    live = await remote_segments(ctx, runtime)
    doomed, _ = await _plan(ctx, runtime, local, live)
    if not doomed:
        runtime.delete_lag_bytes = runtime.delete_lag_segments = 0
    return bool(doomed)


async def run_expiration(
    ctx: TaskContext,
    runtime: PartitionRuntime,
    local: LocalLog,
    guard: Callable[[], None],
) -> int:
    """One run of the expiration task, under its lease; returns how many segments were deleted.

    Plans from a new listing: another instance or a late write may have changed
    what a kept one shows.
    """
    live = await remote_segments(ctx, runtime, fresh=True)
    doomed, new_start = await _plan(ctx, runtime, local, live)
    if new_start is not None and new_start > (runtime.log_start_offset or 0):
        # Published before deleting, so readers stop asking for what is about to go.
        runtime.log_start_offset = new_start
    runtime.delete_lag_segments = len(doomed)
    runtime.delete_lag_bytes = sum(s.segment_size_in_bytes for s in doomed)
    try:
        for segment in doomed:
            guard()
            await delete_remote_segment(ctx, segment)
            runtime.delete_lag_segments -= 1
            runtime.delete_lag_bytes -= segment.segment_size_in_bytes
            runtime.remote_log_size_bytes -= segment.segment_size_in_bytes
            log.debug("deleted remote segment %s", segment.remote_log_segment_id)
    finally:
        if doomed:
            runtime.remote_segments_changed()
    if doomed:
        log.info(
            "retention deleted %d remote segments of %s (%d bytes, offsets %d-%d); "
            "log start offset %s",
            len(doomed),
            runtime.tip,
            sum(s.segment_size_in_bytes for s in doomed),
            min(s.start_offset for s in doomed),
            max(s.end_offset for s in doomed),
            runtime.log_start_offset,
        )
    return len(doomed)
