"""CopyScheduler: the partition registry, one schedule and worker pool per task kind, queries.

Like Kafka's RemoteLogManager, each leader has a copy task (copier pool) and
an expiration task (expiration pool), each follower a follower task (follower
pool); every run of a leader's task holds the partition's lease for that task,
so among several scheduler instances exactly one runs it at a time. Local
retention runs after the copy (leaders) or the follower task (followers).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from remotelog.coordination.lease import Lease, LeaseLostError, Leases, held
from remotelog.core.epochs import epoch_for_offset
from remotelog.core.errors import (
    InvalidArgumentError,
    MetadataNotReadyError,
    RemoteLogError,
    UnknownTopicOrPartitionError,
)
from remotelog.core.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
)
from remotelog.core.model import TopicIdPartition
from remotelog.core.ports import RemoteLogMetadataManager, SegmentDataCopier
from remotelog.core.quota import ByteRateQuota
from remotelog.core.states import RemoteLogSegmentState
from remotelog.core.tasks import BatchedCalls, cancel_and_wait
from remotelog.kafka.state_files import (
    HW_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    CorruptStateFileError,
    parse_leader_epoch_checkpoint,
    parse_partition_metadata,
)
from remotelog.scheduler import metrics
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.copy_task import (
    ensure_log_start_offset,
    find_highest_remote_offset,
    pending,
    run_copy,
)
from remotelog.scheduler.local_log import HighWatermarkCheckpoints, LocalLog
from remotelog.scheduler.partition import (
    Assignment,
    PartitionRuntime,
    Retention,
    Role,
    StaleLeaderError,
    TaskContext,
)
from remotelog.scheduler.remote_delete import delete_remote_segment
from remotelog.scheduler.retention import (
    expiration_due,
    kept_remote_segments,
    may_delete_locally,
    run_expiration,
    run_local_retention,
)
from remotelog.scheduler.schedule import PartitionSchedule

log = logging.getLogger(__name__)


class Kind(enum.Enum):
    COPY = "copy"
    EXPIRATION = "expiration"
    FOLLOWER = "follower"


LEADER_KINDS = (Kind.COPY, Kind.EXPIRATION)


@dataclass(frozen=True)
class PartitionStateView:
    """GetPartitionState's answer."""

    topic_id_partition: TopicIdPartition
    role: Role
    highest_tiered_offset: int
    local_log_start_offset: int
    log_start_offset: int
    copy_lag_bytes: int
    copy_lag_segments: int
    last_error: RemoteLogError | None
    next_run_time_ms: int
    retention: Retention
    segments_deleted_before_tiering: int
    copy_lag_ms: int


def _age_ms(timestamp: int | None, now_ms: int) -> int:
    """How old a record timestamp is; 0 for none (or one from the future)."""
    return 0 if timestamp is None else max(0, now_ms - timestamp)


def _validate_all(leaders: list[Assignment], followers: list[Assignment]) -> None:
    """Every assignment valid and each partition once, naming the first field that is not."""
    seen: set[TopicIdPartition] = set()
    for role, assignments in (("leaders", leaders), ("followers", followers)):
        for position, assignment in enumerate(assignments):
            field = f"{role}[{position}]"
            validate_assignment(assignment, field)
            if assignment.topic_id_partition in seen:
                raise InvalidArgumentError(
                    f"{field}.topic_id_partition",
                    f"{assignment.topic_id_partition} is assigned twice",
                )
            seen.add(assignment.topic_id_partition)


def validate_assignment(assignment: Assignment, field: str) -> None:
    """A partition directory that exists and, if it names its topic id, names this one."""
    directory = assignment.log_dir
    if not directory.is_absolute():
        raise InvalidArgumentError(f"{field}.log_dir", f"{directory} is not an absolute path")
    if not directory.is_dir():
        raise InvalidArgumentError(f"{field}.log_dir", f"{directory} is not a directory")
    tip = assignment.topic_id_partition
    named = f"{tip.topic}-{tip.partition}"
    if directory.name != named:
        # The high watermark is found by this name in the parent's checkpoint file.
        raise InvalidArgumentError(
            f"{field}.log_dir",
            f"{directory} is not named {named}, as Kafka names a partition's directory "
            f"(<topic>-<partition>; its high watermark is read from ../{HW_CHECKPOINT})",
        )
    if assignment.leader_epoch < 0:
        raise InvalidArgumentError(
            f"{field}.leader_epoch", f"must be >= 0, got {assignment.leader_epoch}"
        )
    metadata = directory / PARTITION_METADATA
    if metadata.exists():
        try:
            topic_id = parse_partition_metadata(metadata.read_text(), str(metadata))
        except CorruptStateFileError as error:
            raise InvalidArgumentError(f"{field}.log_dir", str(error)) from error
        if topic_id != assignment.topic_id_partition.topic_id:
            raise InvalidArgumentError(
                f"{field}.topic_id_partition.topic_id",
                f"{directory} belongs to topic id {topic_id}, not "
                f"{assignment.topic_id_partition.topic_id}",
            )
    for name, value in (
        ("retention_ms", assignment.retention_ms),
        ("retention_bytes", assignment.retention_bytes),
    ):
        if value is not None and value < -1:
            raise InvalidArgumentError(f"{field}.{name}", f"must be >= -1, got {value}")
    for name, value in (
        ("local_retention_ms", assignment.local_retention_ms),
        ("local_retention_bytes", assignment.local_retention_bytes),
    ):
        if value is not None and value < -2:
            raise InvalidArgumentError(f"{field}.{name}", f"must be >= -2, got {value}")


class CopyScheduler:
    def __init__(
        self,
        config: CopySchedulerConfig,
        store: SegmentDataCopier,
        metadata: RemoteLogMetadataManager,
        leases: Leases,
        *,
        owner: str | None = None,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.leases = leases
        self.owner = owner or f"broker-{config.broker_id}/{uuid.uuid4().hex[:12]}"
        quota = ByteRateQuota(
            config.copy_max_bytes_per_second,
            config.copy_quota_window_num,
            config.copy_quota_window_size_seconds,
        )
        self.ctx = TaskContext(config, store, metadata, quota)
        self.partitions: dict[TopicIdPartition, PartitionRuntime] = {}
        self.schedules = {
            kind: PartitionSchedule[TopicIdPartition](
                config.task_interval_ms / 1000, config.backoff(), time.monotonic
            )
            for kind in Kind
        }
        self.pool_sizes = {
            Kind.COPY: config.copier_pool_size,
            Kind.EXPIRATION: config.expiration_pool_size,
            Kind.FOLLOWER: config.follower_pool_size,
        }
        self.running: dict[tuple[Kind, TopicIdPartition], asyncio.Task[None]] = {}
        # Runs started together scan their directories in one worker-thread hop.
        self._scan = BatchedCalls(
            functools.partial(LocalLog.scan, checkpoints=HighWatermarkCheckpoints())
        )
        self.runs = dict.fromkeys(Kind, 0)
        self._wake = {kind: asyncio.Event() for kind in Kind}
        self._loops: list[asyncio.Task[None]] = []
        self._busy_s = 0.0
        self._idle_since = time.monotonic()
        self._gauges = metrics.register(self)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loops = [asyncio.create_task(self._loop(kind)) for kind in Kind]

    async def close(self) -> None:
        """Stop the loops; in-flight runs are cancelled and clean up what they copied."""
        await cancel_and_wait([*self._loops, *self.running.values()])
        self._loops = []
        self._gauges.close()

    # ------------------------------------------------------------ registry

    async def on_partition_leadership_changes(
        self, leaders: Iterable[Assignment], followers: Iterable[Assignment]
    ) -> None:
        """KIP-405's call: all assignments taken, or none when one is invalid (checked in
        a worker thread: the checks read the directories)."""
        leaders, followers = list(leaders), list(followers)
        await asyncio.to_thread(_validate_all, leaders, followers)
        await self._take([*leaders, *followers])

    async def take_found(self, assignments: Iterable[Assignment]) -> list[Assignment]:
        """Discovery's hand-over: each assignment checked on its own, one whose directory
        went since the look left for the next look; those taken."""

        def valid() -> list[Assignment]:
            kept = []
            for assignment in assignments:
                try:
                    validate_assignment(assignment, str(assignment.topic_id_partition))
                except InvalidArgumentError as error:
                    log.debug("%s not assigned: %s", assignment.topic_id_partition, error)
                    continue
                kept.append(assignment)
            return kept

        taken = await asyncio.to_thread(valid)
        if taken:
            await self._take(taken)
        return taken

    async def _take(self, assignments: list[Assignment]) -> None:
        await self.metadata.on_partition_leadership_changes(
            [a.topic_id_partition for a in assignments if a.role is Role.LEADER],
            [a.topic_id_partition for a in assignments if a.role is Role.FOLLOWER],
            timeout_s=self.ctx.timeout_s,
        )
        for assignment in assignments:
            tip = assignment.topic_id_partition
            current = self.partitions.get(tip)
            if current is not None and current.assignment == assignment:
                continue  # a repeated notification changes nothing
            self.partitions[tip] = PartitionRuntime(assignment)
            log.info(
                "%s of %s at leader epoch %d, log dir %s",
                assignment.role.name.lower(),
                tip,
                assignment.leader_epoch,
                assignment.log_dir,
            )
            kinds = LEADER_KINDS if assignment.role is Role.LEADER else (Kind.FOLLOWER,)
            for kind in Kind:
                if kind in kinds:
                    self.schedules[kind].run_soon(tip)
                else:
                    self.schedules[kind].remove(tip)
                self._wake[kind].set()

    async def stop_partitions(self, partitions: Iterable[tuple[TopicIdPartition, bool]]) -> None:
        """Unschedule; cancel running tasks (they clean up); delete remote data if asked."""
        stopping = list(partitions)
        for tip, _ in stopping:
            self.partitions.pop(tip, None)
            tasks = []
            for kind in Kind:
                self.schedules[kind].remove(tip)
                task = self.running.get((kind, tip))
                if task is not None:
                    task.cancel()
                    tasks.append(task)
            await asyncio.gather(*tasks, return_exceptions=True)
        for tip, delete_remote_log in stopping:
            log.info("stopped %s%s", tip, ", deleting its remote data" if delete_remote_log else "")
            if delete_remote_log:
                await self._delete_remote_log(tip)
        await self.metadata.on_stop_partitions(
            [tip for tip, _ in stopping], timeout_s=self.ctx.timeout_s
        )

    async def _delete_remote_log(self, tip: TopicIdPartition) -> None:
        segments = [
            s
            async for s in self.metadata.list_remote_log_segments(tip, timeout_s=self.ctx.timeout_s)
            if s.state is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
        ]
        for segment in segments:
            await delete_remote_segment(self.ctx, segment)

    def _runtime(self, tip: TopicIdPartition) -> PartitionRuntime:
        runtime = self.partitions.get(tip)
        if runtime is None:
            raise UnknownTopicOrPartitionError(f"{tip} is not assigned to this scheduler")
        return runtime

    def update_log_start_offset(self, tip: TopicIdPartition, offset: int) -> None:
        if offset < 0:
            raise InvalidArgumentError("log_start_offset", f"must be >= 0, got {offset}")
        runtime = self._runtime(tip)
        runtime.requested_log_start_offset = max(runtime.requested_log_start_offset, offset)
        if runtime.log_start_offset is not None:
            runtime.log_start_offset = max(runtime.log_start_offset, offset)
        for kind in Kind:
            if tip in self.schedules[kind]:
                self.schedules[kind].run_soon(tip)
                self._wake[kind].set()

    # ------------------------------------------------------------ queries

    def partition_state(self, tip: TopicIdPartition) -> PartitionStateView:
        runtime = self._runtime(tip)
        kinds = LEADER_KINDS if runtime.assignment.role is Role.LEADER else (Kind.FOLLOWER,)
        next_runs = [
            run for kind in kinds if (run := self.schedules[kind].next_run(tip)) is not None
        ]
        delay = max(0.0, min(next_runs) - time.monotonic()) if next_runs else 0.0
        local_start = runtime.local_log_start_offset
        return PartitionStateView(
            tip,
            runtime.assignment.role,
            runtime.highest_tiered_offset,
            local_start,
            local_start if runtime.log_start_offset is None else runtime.log_start_offset,
            runtime.copy_lag_bytes,
            runtime.copy_lag_segments,
            runtime.last_error,
            int((time.time() + delay) * 1000),
            Retention.of(runtime.assignment, self.ctx.config),
            runtime.segments_deleted_before_tiering,
            _age_ms(runtime.oldest_pending_timestamp, self.ctx.now_ms()),
        )

    async def list_offsets(
        self, tip: TopicIdPartition, timestamp: int
    ) -> tuple[int | None, int | None]:
        """Kafka's -4 / -5 / -6 ListOffsets answers: (offset, leader epoch), None when none."""
        runtime = self._runtime(tip)
        local = await self._scan(runtime.directory)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            offset: int | None = local.local_log_start_offset
        elif timestamp == LATEST_TIERED_TIMESTAMP:
            offset = runtime.highest_tiered_offset if runtime.highest_tiered_offset >= 0 else None
        elif timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            log_end, _ = await asyncio.to_thread(local.end_state)
            first = max(runtime.highest_tiered_offset + 1, local.local_log_start_offset)
            offset = first if first < log_end else None
        else:
            raise InvalidArgumentError(
                "timestamp", f"{timestamp} is not -4, -5 or -6 (tiering-specific ListOffsets)"
            )
        epoch = None if offset is None else epoch_for_offset(local.leader_epochs, offset)
        return offset, epoch

    # ------------------------------------------------------------ running

    async def _loop(self, kind: Kind) -> None:
        schedule = self.schedules[kind]
        wake = self._wake[kind]
        while True:
            wake.clear()
            self._start_due(kind)
            wait = schedule.seconds_until_next()
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: 3.11's wait_for can lose a cancellation.
                async with asyncio.timeout(None if wait is None else max(wait, 0.001)):
                    await wake.wait()

    def _start_due(self, kind: Kind) -> None:
        """Start the due runs the pool has room for; idle expirations end without a task."""
        schedule = self.schedules[kind]
        while due := schedule.due(self.pool_sizes[kind] - sum(k is kind for k, _ in self.running)):
            for tip in due:
                runtime = self.partitions.get(tip)
                if kind is Kind.EXPIRATION and runtime and self._idle_expiration(runtime):
                    self._finished(kind, tip, time.monotonic(), failed=False)
                else:
                    self.running[(kind, tip)] = asyncio.create_task(self._run(kind, tip))

    async def _run(self, kind: Kind, tip: TopicIdPartition) -> None:
        started = time.monotonic()
        failed = False
        runtime = self.partitions.get(tip)
        try:
            if runtime is not None:
                await self._run_task(kind, runtime)
                # Copying stopped for good (custom metadata over the cap) stays the error.
                runtime.last_error = runtime.copy_disabled
        except asyncio.CancelledError:
            raise
        except (StaleLeaderError, LeaseLostError) as error:
            log.info("%s run of %s stopped: %s", kind.value, tip, error)
        except MetadataNotReadyError as error:
            # The metadata manager is still loading the partition: try at the next interval.
            log.info("%s run of %s waits: %s", kind.value, tip, error)
        except RemoteLogError as error:
            failed = True
            if runtime is not None:
                runtime.last_error = error
            log.warning("%s run of %s failed: %s", kind.value, tip, error)
        except Exception as error:  # a bug or an unexpected OS error: keep the others running
            failed = True
            if runtime is not None:
                runtime.last_error = RemoteLogError(f"{type(error).__name__}: {error}")
            log.exception("%s run of %s failed", kind.value, tip)
        finally:
            self._finished(kind, tip, started, failed=failed)

    def _finished(self, kind: Kind, tip: TopicIdPartition, started: float, *, failed: bool) -> None:
        self._busy_s += time.monotonic() - started
        self.runs[kind] += 1
        self.running.pop((kind, tip), None)
        self.schedules[kind].finished(tip, failed=failed)
        self._wake[kind].set()

    def _guard(self, runtime: PartitionRuntime, lease: Lease) -> None:
        """Before each metadata write: still the lease holder, still the leader at this epoch."""
        lease.check()
        if self.partitions.get(runtime.tip) is not runtime:
            raise StaleLeaderError(f"{runtime.tip} was reassigned or stopped")
        checkpoint = runtime.directory / LEADER_EPOCH_CHECKPOINT
        try:
            epochs = parse_leader_epoch_checkpoint(checkpoint.read_text(), str(checkpoint))
        except (FileNotFoundError, CorruptStateFileError):
            return
        if epochs and epochs[-1][0] > runtime.assignment.leader_epoch:
            raise StaleLeaderError(
                f"{runtime.tip}: the log has leader epoch {epochs[-1][0]}, newer than the "
                f"assigned {runtime.assignment.leader_epoch}"
            )

    async def _run_task(self, kind: Kind, runtime: PartitionRuntime) -> None:
        if kind is Kind.FOLLOWER:
            local = await self._scan(runtime.directory)

            async def log_end() -> int:
                return (await asyncio.to_thread(local.end_state))[0]

            runtime.highest_tiered_offset = await find_highest_remote_offset(
                self.ctx, runtime, local.leader_epochs, log_end
            )
            runtime.update_lag(local)
            await run_local_retention(self.ctx, runtime, local)
            return
        local = await self._scan(runtime.directory)
        # Decided without the lease: most runs of most partitions write nothing.
        if kind is Kind.COPY:
            if self._idle_copy(runtime, local):
                runtime.update_lag(local)
                return
        else:
            await ensure_log_start_offset(self.ctx, runtime, local)
            if not await expiration_due(self.ctx, runtime, local):
                return
        name = f"copy-scheduler/{kind.value}/{runtime.tip.topic_id}/{runtime.tip.partition}"
        async with held(self.leases, name, self.owner, self.config.lease_ms) as lease:
            if lease is None:
                return  # another instance runs this partition's task now

            def guard() -> None:
                self._guard(runtime, lease)

            if kind is Kind.EXPIRATION:
                await run_expiration(self.ctx, runtime, local, guard)
                return
            tiered = runtime.highest_tiered_offset
            await run_copy(self.ctx, runtime, local, guard, lease.fencing_token)
            if runtime.highest_tiered_offset != tiered:
                # Copies take a while: retention sizes the log as it is now.
                local = await self._scan(runtime.directory)
            await run_local_retention(self.ctx, runtime, local)

    def _idle_copy(self, runtime: PartitionRuntime, local: LocalLog) -> bool:
        """After the first run: nothing to copy and nothing local retention may delete.

        Another instance only ever raises the highest tiered offset, so a
        stale one here can only mean more work, never less.
        """
        return (
            runtime.copy_token is not None
            and runtime.log_start_offset is not None
            and not pending(local, runtime)
            and not may_delete_locally(local, runtime, self.ctx)
        )

    @staticmethod
    def _idle_expiration(runtime: PartitionRuntime) -> bool:
        """Nothing tiered, as a recent listing says: nothing to expire (see remote_segments)."""
        return (
            runtime.log_start_offset is not None
            and runtime.remote_segments == []
            and kept_remote_segments(runtime) is not None
        )

    # ------------------------------------------------------------ metrics

    def partition_gauges(self) -> Iterable[tuple[dict[str, str | int], dict[str, float]]]:
        for tip, runtime in list(self.partitions.items()):
            attributes: dict[str, str | int] = {"topic": tip.topic, "partition": tip.partition}
            yield (
                attributes,
                {
                    "RemoteCopyLagBytes": runtime.copy_lag_bytes,
                    "RemoteCopyLagSegments": runtime.copy_lag_segments,
                    "RemoteDeleteLagBytes": runtime.delete_lag_bytes,
                    "RemoteDeleteLagSegments": runtime.delete_lag_segments,
                    "RemoteLogSizeBytes": runtime.remote_log_size_bytes,
                    "RemoteLogSizeComputationTime": runtime.remote_log_size_computation_ms,
                    "RemoteLogMetadataCount": runtime.remote_log_metadata_count,
                },
            )

    def idle_percent(self) -> float:
        """Share of worker capacity not running tasks since the last observation."""
        now = time.monotonic()
        capacity = (now - self._idle_since) * sum(self.pool_sizes.values())
        busy, self._busy_s, self._idle_since = self._busy_s, 0.0, now
        return 100.0 if capacity <= 0 else max(0.0, 100.0 * (1 - busy / capacity))
