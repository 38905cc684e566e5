"""TopicBasedRemoteLogMetadataManager: Kafka's RLMM over `__remote_log_metadata`, asyncio.

Composed as Kafka composes its own: the metadata consumer (topic.MetadataConsumer,
Kafka's ConsumerTask) applies records to the partition metadata store
(partition_store, Kafka's RemotePartitionMetadataStore); writes are checked
against the store and published by the producer manager (producer_manager),
which returns once this instance has applied them. The manager is handed its
Kafka clients (startup.open_metadata_manager makes them), validates writes, answers
reads from the store, leaves what recovery needs to recovery.Recoveries, and writes
a snapshot of all materialised state every N events or T ms and at close, which a
restart loads to consume only what came after.

All state is touched by the event loop thread alone; the Kafka clients'
threads hand records over through `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import (
    AsyncGenerator,
    Iterable,
    Iterator,
)
from pathlib import Path
from typing import Protocol

from opentelemetry.metrics import Observation

from remotelog.coordination.lease import InProcessLeases, Leases
from remotelog.core.errors import (
    InvalidArgumentError,
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
)
from remotelog.core.gauges import InstanceGauges
from remotelog.core.metrics import METADATA_READ_LATENCY, METADATA_SEGMENTS, histogram
from remotelog.core.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionSummary,
    TopicIdPartition,
    check_custom_metadata_size,
)
from remotelog.core.ports import RemoteLogMetadataManager, SegmentDescriber
from remotelog.core.states import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    is_valid_partition_delete_transition,
    is_valid_segment_transition,
)
from remotelog.metadata import snapshot as snapshots
from remotelog.metadata.config import MetadataManagerConfig, refuse_write
from remotelog.metadata.partition_store import (
    Assignments,
    RemotePartitionMetadataStore,
    refuse_deleted,
    refuse_new_segments,
)
from remotelog.metadata.producer_manager import ProducerManager, Publisher
from remotelog.metadata.recovery import Recoveries
from remotelog.metadata.restart import LoadedSnapshot
from remotelog.metadata.topic import (
    METADATA_TOPIC,
    TopicInfo,
)

log = logging.getLogger(__name__)
SCOPE = "remotelog.metadata"


class KafkaClient(Protocol):
    def close(self) -> None: ...


class Consumer(Assignments, KafkaClient, Protocol):
    def start(self) -> None: ...


class Producer(Publisher, KafkaClient, Protocol):
    """The metadata producer (topic.MetadataProducer) as the manager holds it."""


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Kafka's RemoteLogMetadataManager (core.ports) over the metadata topic."""

    def __init__(
        self,
        config: MetadataManagerConfig,
        topic: TopicInfo,
        producer: Producer,
        consumer: Consumer,
        *,
        topic_name: str = METADATA_TOPIC,
        snapshot: LoadedSnapshot | None = None,
        recoveries: Leases | None = None,
        segments: SegmentDescriber | None = None,
    ) -> None:
        self.config = config
        self.topic = topic
        self.topic_name = topic_name
        self._producer_client = producer
        self._consumer = consumer
        snapshot = snapshot or LoadedSnapshot()
        self.snapshot_status = snapshot.status
        self._registered_at_start = snapshot.registered
        self.store = RemotePartitionMetadataStore(
            topic_name,
            config.metadata_topic_num_partitions,
            consumer,
            parked=snapshot.states,
            on_applied=self._count_applied,
        )
        self.producer = ProducerManager(
            producer,
            self.store,
            consume_wait_ms=config.consume_wait_ms,
            scope=SCOPE,
            keyed=config.keyed_records,
        )
        # Who recovers which partition, and which a lost topic held (recovery.py).
        self.recoveries = Recoveries(
            config,
            self.store,
            self.producer,
            recoveries or InProcessLeases(),
            segments,
            snapshot.lost,
        )
        self._read_latency = histogram(SCOPE, METADATA_READ_LATENCY)
        self._events_since_snapshot = 0
        # Records applied since start (a restart from a snapshot applies only the tail).
        self.events_applied = 0
        self._snapshot_due = asyncio.Event()
        self._snapshot_task: asyncio.Task[None] | None = None
        self._closed = False
        self._gauges: InstanceGauges | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        self._consumer.start()
        for tip in self._registered_at_start:
            self.store.register(tip)
        self._snapshot_task = asyncio.create_task(self._snapshot_loop())
        self.recoveries.start()
        # Live segments materialised by this manager.
        self._gauges = InstanceGauges(
            SCOPE,
            [METADATA_SEGMENTS],
            lambda _: [Observation(self.segment_count())],
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._gauges is not None:
            self._gauges.close()
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._snapshot_task
        await asyncio.to_thread(self._consumer.close)
        await asyncio.to_thread(self._producer_client.close)
        await self.write_snapshot()
        self.store.close("the metadata manager is shutting down")
        await self.recoveries.close()

    def _count_applied(self, applied: int) -> None:
        self.events_applied += applied
        self._events_since_snapshot += applied
        if self._events_since_snapshot >= self.config.snapshot_interval_events:
            self._snapshot_due.set()

    # -- registration and readiness ------------------------------------------------

    async def on_partition_leadership_changes(
        self,
        leaders: Iterable[TopicIdPartition],
        followers: Iterable[TopicIdPartition] = (),
        *,
        timeout_s: float | None = None,
    ) -> None:
        for tip in itertools.chain(leaders, followers):
            self.store.register(tip)

    async def on_stop_partitions(
        self, partitions: Iterable[TopicIdPartition], *, timeout_s: float | None = None
    ) -> None:
        self.store.stop(partitions)

    async def is_ready(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> bool:
        return self.store.is_ready(partition) and not self.recoveries.not_ready(partition)

    @property
    def recovery_awaited(self) -> dict[TopicIdPartition, int]:
        return self.recoveries.awaited

    def registered_partitions(self) -> frozenset[TopicIdPartition]:
        return frozenset(self.store.registered)

    # -- writes -----------------------------------------------------------------------

    def _refuse_if_read_only(self, what: str) -> None:
        """Before any check of the write: its answer is the same whatever it holds."""
        if self.config.read_only:
            raise refuse_write(what)

    async def add_remote_log_segment_metadata(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> None:
        self._refuse_if_read_only("AddRemoteLogSegmentMetadata")
        if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidArgumentError(
                "remote_log_segment_metadata.state",
                f"a new segment must be COPY_SEGMENT_STARTED, not {metadata.state.name}",
            )
        check_custom_metadata_size(metadata.custom_metadata, self.config.custom_metadata_max_bytes)
        tip = metadata.topic_id_partition
        state = self.store.ready(tip, register=True)
        refuse_new_segments(state, tip)
        await self.recoveries.refuse_if_recovering(tip)
        cache = state.cache(tip)
        current = (
            None if cache is None else cache.segment_state(metadata.remote_log_segment_id.id.bytes)
        )
        _check_segment_transition(current, metadata.state, metadata)
        await self.producer.publish(state.partition, metadata)

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate, *, timeout_s: float | None = None
    ) -> None:
        self._refuse_if_read_only("UpdateRemoteLogSegmentMetadata")
        if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidArgumentError(
                "remote_log_segment_metadata_update.state",
                "an update can not move a segment to COPY_SEGMENT_STARTED; add it instead",
            )
        check_custom_metadata_size(update.custom_metadata, self.config.custom_metadata_max_bytes)
        tip = update.topic_id_partition
        state = self.store.ready(tip, register=True)
        refuse_deleted(state, tip)
        if update.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
            # A copy under way finishes during a recovery; a deletion waits for its end.
            await self.recoveries.refuse_if_recovering(tip)
        cache = state.cache(tip)
        current = (
            None if cache is None else cache.segment_state(update.remote_log_segment_id.id.bytes)
        )
        if current is None:
            raise RemoteResourceNotFoundError(
                f"no remote log segment metadata for {update.remote_log_segment_id}"
            )
        _check_segment_transition(current, update.state, update)
        await self.producer.publish(state.partition, update)

    async def put_remote_partition_delete_metadata(
        self, delete: RemotePartitionDeleteMetadata, *, timeout_s: float | None = None
    ) -> None:
        self._refuse_if_read_only("PutRemotePartitionDeleteMetadata")
        tip = delete.topic_id_partition
        state = self.store.ready(tip, register=True)
        await self.recoveries.refuse_if_recovering(tip)
        if tip in state.deleted:
            if delete.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                return  # already finished: idempotent
            raise InvalidStateTransitionError(
                f"deletion of {tip} already finished; it can not move to {delete.state.name}"
            )
        current = state.deletes.get(tip)
        source = None if current is None else current.state
        if not is_valid_partition_delete_transition(source, delete.state):
            raise InvalidStateTransitionError(
                f"partition {tip}: {source.name if source else 'no deletion state'} can not "
                f"move to {delete.state.name}"
            )
        await self.producer.publish(state.partition, delete)

    # -- reads: answered from the store at once (`timeout_s` is the port's) -------------

    @contextlib.contextmanager
    def _timed_read(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._read_latency.record((time.perf_counter() - started) * 1000)

    async def remote_log_segment_metadata(
        self,
        partition: TopicIdPartition,
        leader_epoch: int,
        offset: int,
        *,
        timeout_s: float | None = None,
    ) -> RemoteLogSegmentMetadata | None:
        with self._timed_read():
            return self.store.cache(partition).remote_log_segment_metadata(leader_epoch, offset)

    async def highest_offset_for_epoch(
        self, partition: TopicIdPartition, leader_epoch: int, *, timeout_s: float | None = None
    ) -> int | None:
        with self._timed_read():
            return self.store.cache(partition).highest_offset_for_epoch(leader_epoch)

    async def list_remote_log_segments(
        self,
        partition: TopicIdPartition,
        leader_epoch: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[RemoteLogSegmentMetadata, None]:
        for segment in self.remote_log_segments(partition, leader_epoch):
            yield segment

    def remote_log_segments(
        self, partition: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """list_remote_log_segments as one list, for the service that sends it in batches."""
        with self._timed_read():
            return self.store.cache(partition).list_remote_log_segments(leader_epoch)

    async def remote_log_size(
        self, partition: TopicIdPartition, leader_epoch: int, *, timeout_s: float | None = None
    ) -> int:
        with self._timed_read():
            return self.store.cache(partition).remote_log_size(leader_epoch)

    async def next_segment_with_txn_index(
        self,
        partition: TopicIdPartition,
        leader_epoch: int,
        offset: int,
        *,
        timeout_s: float | None = None,
    ) -> RemoteLogSegmentMetadata | None:
        with self._timed_read():
            return self.store.cache(partition).next_segment_with_txn_index(leader_epoch, offset)

    async def remote_partition_delete_state(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> RemotePartitionDeleteState | None:
        return self.store.delete_state(partition)

    async def list_remote_partitions(
        self, topic: str | None = None, *, timeout_s: float | None = None
    ) -> list[RemotePartitionSummary]:
        """Every user partition (of `topic`, or all) with COPY_SEGMENT_FINISHED segments;
        see RemotePartitionMetadataStore.list_remote_partitions."""
        with self._timed_read():
            return self.store.list_remote_partitions(topic)

    def segment_count(self) -> int:
        return self.store.segment_count()

    # -- snapshots ----------------------------------------------------------------------

    async def _snapshot_loop(self) -> None:
        interval_s = self.config.snapshot_interval_ms / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await self._snapshot_due.wait()
            self._snapshot_due.clear()
            if self._events_since_snapshot:
                try:
                    await self.write_snapshot()
                except OSError as exc:
                    log.error("could not write the metadata snapshot: %s", exc)

    async def write_snapshot(self) -> Path:
        """Write the snapshot now (also every N events / T ms, and at close)."""
        self._events_since_snapshot = 0
        snapshot = snapshots.Snapshot(
            topic_id=self.topic.topic_id,
            num_partitions=self.topic.partitions,
            registered=frozenset(self.store.registered),
            states=snapshots.copy_states(self.store.states()),
        )
        directory = Path(self.config.snapshot_dir).expanduser()
        return await asyncio.to_thread(snapshots.write, directory, snapshot)


def _check_segment_transition(
    current: RemoteLogSegmentState | None, target: RemoteLogSegmentState, event: object
) -> None:
    if not is_valid_segment_transition(current, target):
        segment = getattr(event, "remote_log_segment_id", "")
        raise InvalidStateTransitionError(
            f"segment {segment}: {current.name if current else 'no state'} can not move to "
            f"{target.name}"
        )
