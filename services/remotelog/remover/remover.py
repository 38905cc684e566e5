"""PartitionRemover: KIP-405's RemotePartitionRemover for the topic-based metadata manager.

One worker per metadata-topic partition. A worker runs every
`remote.partition.remover.task.interval.ms`, and at once when a new marker
arrives, holding that metadata partition's lease (so among several instances
exactly one works on it), and for each pending partition, oldest marker first:

    DELETE_PARTITION_STARTED
    -> per segment: DELETE_SEGMENT_STARTED -> store delete -> DELETE_SEGMENT_FINISHED
    -> DELETE_PARTITION_FINISHED

then commits the tracker's safe offset. Every step is idempotent and checked
against the metadata manager first, so a crash anywhere is finished by the
next run (here or on another instance) without redoing finished work. A
failed run retries with exponential backoff, never committing past the
partition it could not finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable

from remotelog.coordination.lease import Lease, LeaseLostError, Leases, held
from remotelog.core.errors import (
    InvalidStateTransitionError,
    MetadataNotReadyError,
    RemoteLogError,
    RemoteResourceNotFoundError,
    UnknownTopicOrPartitionError,
)
from remotelog.core.gauges import InstanceGauges
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.metrics import REMOVER, Instruments
from remotelog.core.model import (
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from remotelog.core.ports import RemoteLogMetadataManager, SegmentDataDeleter
from remotelog.core.remote_delete import RemoteSegmentDeleter
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.core.tasks import cancel_and_wait
from remotelog.metadata.topic import METADATA_TOPIC, EndOfPartition, MetadataConsumer, Record
from remotelog.remover import metrics
from remotelog.remover.config import PartitionRemoverConfig
from remotelog.remover.progress import Progress
from remotelog.remover.tracker import DeletionStatus, DeletionTracker

log = logging.getLogger(__name__)

# After a run that deleted partitions, the next one comes this soon: its own
# events are consumed by then, so progress is committed past them.
_FOLLOW_UP_S = 1.0

MARKED = RemotePartitionDeleteState.DELETE_PARTITION_MARKED
STARTED = RemotePartitionDeleteState.DELETE_PARTITION_STARTED
FINISHED = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED


class PartitionRemover:
    def __init__(
        self,
        config: PartitionRemoverConfig,
        metadata: RemoteLogMetadataManager,
        store: SegmentDataDeleter,
        leases: Leases,
        progress: Progress,
        *,
        topic: str = METADATA_TOPIC,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.leases = leases
        self.progress = progress
        self.topic = topic
        self.owner = f"remover-{uuid.uuid4()}"
        self.timeout_s = config.rpc_timeout_ms / 1000
        self._clock = clock
        self.deleter = RemoteSegmentDeleter(
            store,
            metadata,
            config.broker_id,
            self.timeout_s,
            Instruments(metrics.SCOPE, REMOVER),
            self._clock,
        )
        self.backoff = config.backoff()
        self.tracker = DeletionTracker(config.metadata_topic_num_partitions)
        self._committed: dict[int, int] = {}
        self._wake: dict[int, asyncio.Event] = {}
        self._uncommitted_deletions: set[int] = set()
        self._workers: list[asyncio.Task[None]] = []
        self._gauges: InstanceGauges | None = None
        self._consumer: MetadataConsumer | None = None

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        parts = list(range(self.config.metadata_topic_num_partitions))
        self._committed = await self.progress.committed(parts)
        for part in parts:
            self.tracker.start(part, self._committed.get(part, 0))
            self._wake[part] = asyncio.Event()
        self._consumer = MetadataConsumer(
            kafka_client_config(self.config),
            topic=self.topic,
            loop=asyncio.get_running_loop(),
            sink=self._on_records,
            fetch_wait_ms=self.config.consumer_fetch_wait_ms,
        )
        self._consumer.start()
        for part in parts:
            self._consumer.assign(part, self._committed.get(part, 0), 1)
        self._workers = [
            asyncio.create_task(self._work(part), name=f"partition-remover-{part}")
            for part in parts
        ]
        self._gauges = metrics.register(self)

    async def close(self) -> None:
        if self._gauges is not None:
            self._gauges.close()
        await cancel_and_wait(self._workers)
        self._workers = []
        if self._consumer is not None:
            await asyncio.to_thread(self._consumer.close)
            self._consumer = None

    def _on_records(self, records: list[Record], ends: list[EndOfPartition]) -> None:
        for part, _, offset, event in records:
            if self.tracker.apply(part, offset, event):
                self._wake[part].set()
            elif isinstance(event, RemotePartitionDeleteMetadata):
                self._uncommitted_deletions.add(part)
        for part, _, end in ends:
            self.tracker.reached(part, end)
            # Deletion events read up to the end (a finish, a late duplicate marker):
            # commit past them now rather than an interval later.
            if part in self._uncommitted_deletions:
                self._wake[part].set()

    # -- the controller's step --------------------------------------------------------

    async def mark_partitions_for_deletion(
        self, partitions: Iterable[TopicIdPartition], broker_id: int
    ) -> None:
        """Publish DELETE_PARTITION_MARKED; a partition already being deleted is left alone."""
        for tip in partitions:
            if await self._delete_state(tip) in (STARTED, FINISHED):
                continue
            marker = RemotePartitionDeleteMetadata(tip, MARKED, self.now_ms(), broker_id)
            try:
                await self.metadata.put_remote_partition_delete_metadata(
                    marker, timeout_s=self.timeout_s
                )
            except InvalidStateTransitionError:
                # A remover started the deletion between the look and the write: the
                # marker is redundant, not wrong.
                if await self._delete_state(tip) not in (STARTED, FINISHED):
                    raise

    async def _delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        return await self.metadata.remote_partition_delete_state(tip, timeout_s=self.timeout_s)

    # -- status -----------------------------------------------------------------------

    async def deletion_status(self, tip: TopicIdPartition) -> DeletionStatus:
        """This instance's view, brought up to date by the metadata manager, the truth."""
        known = self.tracker.status(tip)
        if known is not None and not known.pending:
            return dataclasses.replace(known)
        state = await self._delete_state(tip)
        if state is None and known is None:
            raise UnknownTopicOrPartitionError(
                f"{tip} was never marked for deletion", metadata={"partition": str(tip)}
            )
        if known is None:
            known = DeletionStatus(tip, self.tracker.metadata_partition_of(tip), MARKED, 0, 0)
        status = dataclasses.replace(known)
        if state is not None and state.value > status.state.value:
            status.state = state
        if status.state is FINISHED:
            status.segments_remaining = 0
            status.last_error_reason = status.last_error_message = ""
        else:
            status.segments_remaining = await self._count_segments(tip)
        return status

    async def pending_deletions(self) -> list[DeletionStatus]:
        pending = sorted(
            self.tracker.pending(),
            key=lambda s: (s.topic_id_partition.topic, s.topic_id_partition.partition),
        )
        return [await self.deletion_status(s.topic_id_partition) for s in pending]

    async def _count_segments(self, tip: TopicIdPartition) -> int:
        segments = self.metadata.list_remote_log_segments(tip, timeout_s=self.timeout_s)
        try:
            return len([s async for s in segments])
        except RemoteResourceNotFoundError:  # finished since the state was read
            return 0

    def pending_count(self) -> int:
        return len(self.tracker.pending())

    # -- workers ----------------------------------------------------------------------

    def _has_work(self, part: int) -> bool:
        return bool(self.tracker.pending(part)) or (
            self.tracker.safe_offset(part) > self._committed.get(part, 0)
        )

    async def _work(self, part: int) -> None:
        wake = self._wake[part]
        failures = 0
        delay_s = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_s):
                    await wake.wait()
            wake.clear()
            delay_s = self.config.task_interval_ms / 1000
            if not self._has_work(part):
                continue
            try:
                worked = await self._run_holding_lease(part)
                failures = 0
                if worked is None:  # another instance holds it; look when its lease would expire
                    delay_s = min(delay_s, self.config.lease_ms / 1000)
                elif worked:  # commit again once this run's own events are consumed
                    delay_s = min(delay_s, _FOLLOW_UP_S)
            except (RemoteLogError, OSError) as exc:
                delay_s = self.backoff.backoff_ms(failures) / 1000
                failures += 1
                log.warning(
                    "partition remover on %s-%d: %s; retrying in %.0f ms",
                    self.topic,
                    part,
                    exc,
                    delay_s * 1000,
                )

    async def _run_holding_lease(self, part: int) -> bool | None:
        """Whether the run had partitions to delete; None when another instance holds the lease."""
        name = f"partition-remover/{self.topic}-{part}"
        async with held(self.leases, name, self.owner, self.config.lease_ms) as lease:
            if lease is None:
                return None
            return await self._run(part, lease)

    async def _run(self, part: int, lease: Lease) -> bool:
        first_error: RemoteLogError | None = None
        pending = self.tracker.pending(part)
        for status in pending:
            try:
                await self._delete_partition(status, lease)
            except LeaseLostError:
                raise
            except RemoteLogError as exc:
                status.last_error_reason = exc.reason
                status.last_error_message = exc.message
                first_error = first_error or exc
        self._uncommitted_deletions.discard(part)
        offset = self.tracker.safe_offset(part)
        if offset > self._committed.get(part, 0):
            lease.check()
            await self.progress.commit(part, offset)
            self._committed[part] = offset
        if first_error is not None:
            raise first_error
        return bool(pending)

    async def _delete_partition(self, status: DeletionStatus, lease: Lease) -> None:
        tip = status.topic_id_partition
        state = await self._delete_state(tip)
        if state is FINISHED:  # a duplicate marker, or finished by an earlier run
            self.tracker.finished(tip, status.event_timestamp_ms)
            return
        if state is None:
            raise MetadataNotReadyError(
                f"the marker of {tip} is not visible to the metadata manager yet"
            )
        if state is MARKED:
            await self._publish(tip, STARTED, lease)
        deleted = 0
        while True:
            segments = [
                s
                async for s in self.metadata.list_remote_log_segments(tip, timeout_s=self.timeout_s)
            ]
            if not segments:
                break
            for segment in segments:
                lease.check()
                await self.deleter.delete(segment)
                deleted += 1
        await self._publish(tip, FINISHED, lease)
        self.tracker.finished(tip, self.now_ms())
        log.info("deleted partition %s: %d remote segments", tip, deleted)

    async def _publish(
        self, tip: TopicIdPartition, state: RemotePartitionDeleteState, lease: Lease
    ) -> None:
        lease.check()
        event = RemotePartitionDeleteMetadata(tip, state, self.now_ms(), self.config.broker_id)
        await self.metadata.put_remote_partition_delete_metadata(event, timeout_s=self.timeout_s)
