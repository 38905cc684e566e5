"""RemoteLogManager's RLMCopyTask: tier each rolled, stable segment above the highest tiered offset.

Per segment, as Kafka does: a new segment id, COPY_SEGMENT_STARTED with the
segment's leader epochs, the log with its indexes, producer snapshot and the
leader-epoch checkpoint up to the segment's end, then COPY_SEGMENT_FINISHED
with the store's custom metadata. A failed copy deletes what it wrote (as
DELETE_SEGMENT_STARTED -> delete -> DELETE_SEGMENT_FINISHED) and leaves the
segment for the next run. `guard()` is called before every metadata write:
it raises when this instance lost the partition's lease or the broker no
longer leads at the assigned epoch, so a stale copier writes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path

from remotelog.core import metrics as m
from remotelog.core.epochs import end_offset_for, entries_in_range
from remotelog.core.errors import CustomMetadataSizeLimitExceededError, RemoteLogError
from remotelog.core.model import (
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from remotelog.core.states import RemoteLogSegmentState
from remotelog.kafka.state_files import leader_epoch_checkpoint_text, producer_snapshot_bytes
from remotelog.scheduler.local_log import LocalLog, LocalSegment, largest_timestamp
from remotelog.scheduler.partition import PartitionRuntime, Retention, TaskContext
from remotelog.scheduler.remote_delete import delete_remote_segment

log = logging.getLogger(__name__)

Guard = Callable[[], None]
# Linux: /proc/self/fd/N opens the file a descriptor holds, whatever its name is now.
_FD_PATHS = Path("/proc/self/fd")


class SegmentDeletedError(Exception):
    """The broker deleted (or renamed to .deleted) a rolled segment before it was tiered."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} is gone")
        self.path = path


@contextlib.contextmanager
def held_open(segment: LocalSegment) -> Iterator[dict[str, Path]]:
    """The segment's files by suffix, each as a path to a descriptor opened now.

    A Kafka broker deletes a segment by renaming its files to .deleted and
    unlinking them a minute later; once a copy has them open, neither stops it.
    A file already gone raises SegmentDeletedError (the transaction index is
    optional), before anything was written anywhere.
    """
    fds: dict[str, int] = {}
    try:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            try:
                fds[suffix] = os.open(segment.path(suffix), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                if suffix != ".txnindex":
                    raise SegmentDeletedError(segment.path(suffix)) from None
        if not _FD_PATHS.is_dir():  # no /proc: by name, as before
            yield {suffix: segment.path(suffix) for suffix in fds}
        else:
            yield {suffix: _FD_PATHS / str(fd) for suffix, fd in fds.items()}
    finally:
        for fd in fds.values():
            os.close(fd)


async def find_highest_remote_offset(
    ctx: TaskContext,
    runtime: PartitionRuntime,
    lineage: tuple[tuple[int, int], ...],
    log_end: Callable[[], Awaitable[int]],
) -> int:
    """RemoteLogManager.findHighestRemoteOffset: newest epoch first, capped by each epoch's end."""
    for epoch, _ in reversed(lineage):
        highest = await ctx.metadata.highest_offset_for_epoch(
            runtime.tip, epoch, timeout_s=ctx.timeout_s
        )
        if highest is None:
            continue
        end = end_offset_for(lineage, epoch, await log_end())
        return end - 1 if end <= highest else highest
    return -1


async def ensure_log_start_offset(
    ctx: TaskContext, runtime: PartitionRuntime, local: LocalLog
) -> int:
    """RemoteLogManager.findLogStartOffset, once per leadership: the first remote segment of
    the oldest epoch of the lineage that has one, else the local log start offset."""
    if runtime.log_start_offset is None:
        found = local.local_log_start_offset
        for epoch, _ in local.leader_epochs:
            listing = ctx.metadata.list_remote_log_segments(
                runtime.tip, epoch, timeout_s=ctx.timeout_s
            )
            async with contextlib.aclosing(listing):
                first = await anext(aiter(listing), None)
            if first is not None:
                found = first.start_offset
                break
        runtime.log_start_offset = max(found, runtime.requested_log_start_offset)
    return runtime.log_start_offset


def pending(local: LocalLog, runtime: PartitionRuntime) -> list[LocalSegment]:
    """Rolled segments above the highest tiered offset and the log start: to be copied."""
    start = max(runtime.highest_tiered_offset + 1, runtime.log_start_offset or 0)
    return [s for s in local.rolled if s.end_offset >= start]


async def run_copy(
    ctx: TaskContext, runtime: PartitionRuntime, local: LocalLog, guard: Guard, token: int
) -> None:
    """One run of the copy task for a leader."""
    end_state: tuple[int, int] | None = None

    async def state() -> tuple[int, int]:
        nonlocal end_state
        if end_state is None:
            end_state = await asyncio.to_thread(local.end_state)
        return end_state

    async def log_end() -> int:
        return (await state())[0]

    first_run = runtime.copy_token is None
    copied_timestamps: list[int] = []
    if runtime.copy_token is None or token != runtime.copy_token + 1:
        # First run, or another instance held the lease since our last run.
        runtime.remote_segments_changed()
        runtime.highest_tiered_offset = await find_highest_remote_offset(
            ctx, runtime, local.leader_epochs, log_end
        )
    runtime.copy_token = token
    await ensure_log_start_offset(ctx, runtime, local)
    if runtime.copy_disabled is not None:
        runtime.update_lag(local)  # copying stopped for good; local retention still runs
        await _note_oldest_pending(runtime, local)
        return
    try:
        candidates = pending(local, runtime)
        if candidates:
            _, stable = await state()
            for segment in candidates:
                if segment.next_offset is None or segment.next_offset > stable:
                    break  # not all of it is stable (or replicated) yet
                guard()
                if waited := await ctx.quota.acquire(segment.size):
                    ctx.metrics.record(m.REMOTE_COPY_THROTTLE_TIME, waited * 1000)
                try:
                    copied_timestamps.append(
                        await copy_segment(ctx, runtime, local, segment, guard)
                    )
                except SegmentDeletedError as gone:
                    runtime.segments_deleted_before_tiering += 1
                    ctx.metrics.add(
                        m.SEGMENTS_DELETED_BEFORE_TIERING, 1, {"topic": runtime.tip.topic}
                    )
                    log.warning(
                        "%s: offsets %d-%d were deleted by the broker before they were "
                        "tiered (%s is gone); the remote tier will not hold them",
                        runtime.tip,
                        segment.base_offset,
                        segment.end_offset,
                        gone.path.name,
                    )
                finally:
                    runtime.remote_segments_changed()
        await _note_oldest_pending(runtime, local)
    finally:
        runtime.update_lag(local)
        if first_run:
            _warn_if_expired_at_once(ctx, runtime, copied_timestamps)


async def _note_oldest_pending(runtime: PartitionRuntime, local: LocalLog) -> None:
    """The timestamp copy_lag_ms counts from: the oldest rolled segment still to copy."""
    waiting = pending(local, runtime)
    if not waiting:
        runtime.oldest_pending_timestamp = None
        return
    try:
        timestamp = await asyncio.to_thread(runtime.largest_timestamp, waiting[0])
    except OSError:
        return  # deleted meanwhile: the next run looks again
    runtime.oldest_pending_timestamp = timestamp if timestamp >= 0 else None


def _warn_if_expired_at_once(
    ctx: TaskContext, runtime: PartitionRuntime, copied_timestamps: list[int]
) -> None:
    """Old data meets the 7-day default: the first run of a partition tiers it and the
    expiration task deletes it from the remote tier at once. Worth a line to whoever
    did not mean that."""
    retention_ms = Retention.of(runtime.assignment, ctx.config).retention_ms
    if retention_ms < 0 or not copied_timestamps:
        return
    expired_before = ctx.now_ms() - retention_ms
    expired = sum(t < expired_before for t in copied_timestamps)
    if expired * 2 > len(copied_timestamps):
        log.warning(
            "%s: %d of the %d segments just tiered are older than its retention.ms=%d; "
            "the expiration task will delete them from the remote tier. To keep them, "
            "assign the topic's retention_ms (or set log.retention.ms; -1 keeps all)",
            runtime.tip,
            expired,
            len(copied_timestamps),
            retention_ms,
        )


async def copy_segment(
    ctx: TaskContext,
    runtime: PartitionRuntime,
    local: LocalLog,
    segment: LocalSegment,
    guard: Guard,
) -> int:
    """Copy one rolled segment; returns its largest record timestamp."""
    assert segment.next_offset is not None
    epochs = entries_in_range(local.leader_epochs, segment.base_offset, segment.next_offset)
    if not epochs:
        raise RemoteLogError(
            f"{segment.path('.log')}: no leader epoch covers offsets {segment.base_offset}.."
            f"{segment.end_offset} in {local.directory / 'leader-epoch-checkpoint'}"
        )
    with held_open(segment) as files:
        return await _copy_held(ctx, runtime, local, segment, epochs, files, guard)


async def _copy_held(
    ctx: TaskContext,
    runtime: PartitionRuntime,
    local: LocalLog,
    segment: LocalSegment,
    epochs: list[tuple[int, int]],
    files: dict[str, Path],
    guard: Guard,
) -> int:
    assert segment.next_offset is not None
    max_timestamp = await asyncio.to_thread(largest_timestamp, segment, files[".log"])
    has_txn_index = ".txnindex" in files and files[".txnindex"].stat().st_size > 0
    snapshot = local.producer_snapshot(segment.next_offset)
    if snapshot is None:
        log.warning("%s: no producer snapshot at %d", local.directory, segment.next_offset)
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(runtime.tip, uuid.uuid4()),
        segment.base_offset,
        segment.end_offset,
        max_timestamp,
        ctx.config.broker_id,
        ctx.now_ms(),
        segment.size,
        tuple(epochs),
        txn_index_empty=not has_txn_index,
    )
    checkpoint = leader_epoch_checkpoint_text(
        entries_in_range(local.leader_epochs, -1, segment.next_offset)
    )
    data = LogSegmentData(
        log_segment=files[".log"],
        offset_index=files[".index"],
        time_index=files[".timeindex"],
        producer_snapshot_index=snapshot or producer_snapshot_bytes([]),
        leader_epoch_index=checkpoint.encode(),
        transaction_index=files[".txnindex"] if has_txn_index else None,
    )
    guard()
    await ctx.metadata.add_remote_log_segment_metadata(metadata, timeout_s=ctx.timeout_s)
    segment_id = metadata.remote_log_segment_id.id
    runtime.segments_being_copied.add(segment_id)
    ctx.metrics.add(m.REMOTE_COPY_REQUESTS, 1, {"topic": runtime.tip.topic})
    try:
        custom = await ctx.store.copy_log_segment_data(metadata, data, timeout_s=ctx.timeout_s)
        if custom is not None and len(custom) > ctx.config.custom_metadata_max_bytes:
            error = CustomMetadataSizeLimitExceededError(
                "custom_metadata",
                f"the store returned {len(custom)} bytes of custom metadata for "
                f"{metadata.remote_log_segment_id}, over remote.log.metadata.custom.metadata."
                f"max.bytes={ctx.config.custom_metadata_max_bytes}: copying of {runtime.tip} stops",
            )
            runtime.copy_disabled = error
            await _clean_up(ctx, runtime, replace(metadata, custom_metadata=custom), guard)
            raise error
        guard()
    except asyncio.CancelledError:
        await asyncio.shield(_remove_objects(ctx, metadata))
        raise
    except RemoteLogError as error:
        ctx.metrics.add(m.REMOTE_COPY_ERRORS, 1, {"topic": runtime.tip.topic})
        if not isinstance(error, CustomMetadataSizeLimitExceededError):
            await _clean_up(ctx, runtime, metadata, guard)
        raise
    finally:
        runtime.segments_being_copied.discard(segment_id)
    await ctx.metadata.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(
            metadata.remote_log_segment_id,
            ctx.now_ms(),
            custom,
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            ctx.config.broker_id,
        ),
        timeout_s=ctx.timeout_s,
    )
    ctx.metrics.add(m.REMOTE_COPY_BYTES, segment.size, {"topic": runtime.tip.topic})
    runtime.highest_tiered_offset = segment.end_offset
    log.info(
        "tiered %s offsets %d-%d (%d bytes) as %s",
        runtime.tip,
        metadata.start_offset,
        metadata.end_offset,
        segment.size,
        metadata.remote_log_segment_id,
    )
    return max_timestamp


async def _clean_up(
    ctx: TaskContext, runtime: PartitionRuntime, metadata: RemoteLogSegmentMetadata, guard: Guard
) -> None:
    """Delete a failed copy; if that fails too, expiration retries it as a dangling segment."""
    try:
        guard()
        await delete_remote_segment(ctx, metadata)
    except RemoteLogError as error:
        log.info(
            "clean-up of %s failed, left for expiration: %s", metadata.remote_log_segment_id, error
        )
        await _remove_objects(ctx, metadata)


async def _remove_objects(ctx: TaskContext, metadata: RemoteLogSegmentMetadata) -> None:
    """Best-effort delete of the objects alone (no metadata write allowed any more)."""
    try:
        await ctx.store.delete_log_segment_data(metadata, timeout_s=ctx.timeout_s)
    except RemoteLogError as error:
        log.info("could not delete the objects of %s: %s", metadata.remote_log_segment_id, error)
