"""TopicBasedRemoteLogMetadataManager: Kafka's RLMM over `__remote_log_metadata`, asyncio.

Composed as Kafka composes its own: the metadata consumer (topic.MetadataConsumer,
Kafka's ConsumerTask) applies records to the partition metadata store
(partition_store, Kafka's RemotePartitionMetadataStore); writes are checked
against the store and published by the producer manager (producer_manager),
which returns once this instance has applied them. The manager is handed its
Kafka clients (open_metadata_manager makes them), validates writes, answers
reads from the store, and writes a snapshot of all materialised state every N
events or T ms and at close, which a restart loads to consume only what came
after.

All state is touched by the event loop thread alone; the Kafka clients'
threads hand records over through `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Protocol

from opentelemetry.metrics import Observation

from remotelog.coordination.factory import open_leases
from remotelog.coordination.held_names import HeldNames
from remotelog.coordination.lease import InProcessLeases, Lease, Leases, held
from remotelog.core.errors import (
    InvalidArgumentError,
    InvalidStateTransitionError,
    MetadataNotReadyError,
    ReadOnlyMetadataError,
    RecoveryInProgressError,
    RemoteResourceNotFoundError,
    ServiceUnavailableError,
)
from remotelog.core.gauges import InstanceGauges
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.metrics import METADATA_READ_LATENCY, METADATA_SEGMENTS, histogram
from remotelog.core.model import (
    RecoveredSegments,
    RemoteLogMetadata,
    RemoteLogSegmentId,
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
from remotelog.core.tasks import bounded_gather, in_thread_until_cancelled
from remotelog.metadata import awaiting_recovery
from remotelog.metadata import snapshot as snapshots
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.partition_state import MetadataPartitionState
from remotelog.metadata.partition_store import (
    Assignments,
    RemotePartitionMetadataStore,
    refuse_deleted,
)
from remotelog.metadata.producer_manager import ProducerManager, Publisher
from remotelog.metadata.topic import (
    METADATA_TOPIC,
    EndOfPartition,
    MetadataConsumer,
    MetadataProducer,
    Record,
    TopicInfo,
    await_metadata_topic,
    ensure_metadata_topic,
)

log = logging.getLogger(__name__)
SCOPE = "remotelog.metadata"


class KafkaClient(Protocol):
    def close(self) -> None: ...


class Consumer(Assignments, KafkaClient, Protocol):
    def start(self) -> None: ...


class Producer(Publisher, KafkaClient, Protocol):
    """The metadata producer (topic.MetadataProducer) as the manager holds it."""


READ_ONLY = "remote.log.metadata.read.only"
# A partition's recovery lease lives this long past its holder's last renewal (every
# third of it while the recovery's stream is open): a recovery whose manager died
# leaves the partition ready again within it.
RECOVERY_LEASE_MS = 30_000
# How often a manager reads who is recovering which partition: IsReady and the writes
# answer from that reading, never waiting on Redis.
RECOVERY_WATCH_S = 0.5


def refuse_write(what: str) -> ReadOnlyMetadataError:
    return ReadOnlyMetadataError(
        f"{what} refused: {READ_ONLY}=true, this manager only reads the metadata topic "
        "(its writer is the brokers' own RemoteLogMetadataManager)",
        metadata={"setting": READ_ONLY},
    )


class NoProducer:
    """The producer of a read-only manager: no Kafka producer is made at all."""

    async def publish(self, partition: int, value: bytes) -> int:
        raise refuse_write("a metadata write")

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class LoadedSnapshot:
    """What a start takes from the snapshot: states by metadata partition, the registered
    partitions, and how it went ("none", "loaded", "discarded: <why>")."""

    states: dict[int, MetadataPartitionState] = field(default_factory=dict)
    registered: frozenset[TopicIdPartition] = frozenset()
    status: str = "none"
    # Partitions with segments in a snapshot of another topic id: the topic lost them.
    lost: frozenset[TopicIdPartition] = frozenset()


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
        # Who recovers which partition (leases in Redis, shared by every instance, when
        # `redis.url` is set): a partition being recovered is not ready.
        self._recoveries = recoveries or InProcessLeases()
        # The store whose manifests a recovery's segments must match to be written.
        self._segments = segments
        self._recovering = HeldNames(
            self._recoveries,
            _RECOVERY_LEASES,
            interval_s=RECOVERY_WATCH_S,
            forget_after_s=RECOVERY_LEASE_MS / 1000,
        )
        self.topic = topic
        self.topic_name = topic_name
        self._producer_client = producer
        self._consumer = consumer
        snapshot = snapshot or LoadedSnapshot()
        self.snapshot_status = snapshot.status
        self._registered_at_start = snapshot.registered
        self._awaiting_recovery = self._partitions_awaiting_recovery(snapshot.lost)
        self._awaiting_written = asyncio.Lock()  # recoveries of several partitions end at once
        # How often each of them was answered not ready (tests wait on a broker asking).
        self.recovery_awaited: dict[TopicIdPartition, int] = {}
        self.store = RemotePartitionMetadataStore(
            topic_name,
            config.metadata_topic_num_partitions,
            consumer,
            parked=snapshot.states,
            on_applied=self._count_applied,
        )
        self.producer = ProducerManager(
            producer, self.store, consume_wait_ms=config.consume_wait_ms, scope=SCOPE
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
        self._recovering.start()
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
        await self._recovering.close()
        await self._recoveries.close()

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
        if partition in self._awaiting_recovery:
            self.recovery_awaited[partition] = self.recovery_awaited.get(partition, 0) + 1
            return False
        return self.store.is_ready(partition) and self.recovered_by(partition) is None

    def _partitions_awaiting_recovery(
        self, lost: frozenset[TopicIdPartition]
    ) -> set[TopicIdPartition]:
        """Those the topic lost now and at earlier starts, unless the operator said to go
        on without a recovery; said in one line."""
        directory = Path(self.config.snapshot_dir).expanduser()
        if not self.config.await_recovery:
            if lost or awaiting_recovery.load(directory):
                log.warning(
                    "serving the partitions the lost metadata topic held as empty "
                    "(remote.log.metadata.await.recovery=false)"
                )
            awaiting_recovery.write(directory, ())
            return set()
        awaiting = awaiting_recovery.load(directory) | lost
        if lost:
            awaiting_recovery.write(directory, awaiting)
        if awaiting:
            named = ", ".join(sorted(str(p) for p in awaiting)[:5])
            log.warning(
                "%d partitions' tiered segments were in a lost metadata topic (%s%s): they are "
                "not ready until `remotelog recover` writes them back, or until "
                "remote.log.metadata.await.recovery=false",
                len(awaiting),
                named,
                ", ..." if len(awaiting) > 5 else "",
            )
        return awaiting

    def recovered_by(self, partition: TopicIdPartition) -> str | None:
        """Who is recovering the partition, as last read (Redis is never waited on: a
        Redis that hangs must not stop tiering, which only a recovery needs it for)."""
        return self._recovering.holder(_recovery_lease(partition))

    async def _refuse_if_recovering(self, partition: TopicIdPartition) -> None:
        """A write of a partition being recovered is refused as not ready: Kafka's plugin
        then asks IsReady again, which says no until the recovery ends."""
        if partition in self._awaiting_recovery:
            raise MetadataNotReadyError(
                f"{partition}'s tiered segments were in a lost metadata topic: not ready "
                "until `remotelog recover` writes them back (or "
                "remote.log.metadata.await.recovery=false)",
                metadata={"partition": str(partition)},
            )
        holder = self.recovered_by(partition)
        if holder is not None:
            raise MetadataNotReadyError(
                f"{partition} is being recovered by {holder}: not ready until it ends",
                metadata={"partition": str(partition), "recovery": holder},
            )

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
        _refuse_new_segments(state, tip)
        await self._refuse_if_recovering(tip)
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
            await self._refuse_if_recovering(tip)
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
        await self._refuse_if_recovering(tip)
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

    # -- recovery (not Kafka's): a partition's segments written back from manifests -----

    async def recover_batches(
        self,
        partition: TopicIdPartition,
        batches: AsyncIterable[Sequence[RemoteLogSegmentMetadata]],
        *,
        recovery: str,
        dry_run: bool = False,
    ) -> RecoveredSegments:
        """Each segment of `batches` (as its copy finished) this manager does not know,
        written as Kafka's copy writes it: COPY_SEGMENT_STARTED, then FINISHED with its
        custom metadata; each it knows only as STARTED, its FINISHED (the store holds its
        copy whole: a copy whose last record was lost, or a recovery cut off). `recovery`
        names the run; while it runs, the partition is not ready and a second run of it
        is refused, naming this one. A dry run takes no lease and writes nothing."""
        if not dry_run:
            self._refuse_if_read_only("RecoverRemoteLogSegments")
        written: list[RemoteLogSegmentId] = []
        completed: list[RemoteLogSegmentId] = []
        lease: Lease | None = None
        async with contextlib.AsyncExitStack() as stack:
            if not dry_run:
                name = _recovery_lease(partition)
                lease = await stack.enter_async_context(
                    held(self._recoveries, name, recovery, RECOVERY_LEASE_MS)
                )
                if lease is None:
                    holder = await self._recoveries.holder(name) or "another recovery"
                    raise RecoveryInProgressError(
                        f"{partition} is being recovered by {holder}; run again once it has ended",
                        metadata={"partition": str(partition), "recovery": holder},
                    )
                self._recovering.hold(name, recovery)
                stack.callback(self._recovering.release, name)
                # Every manager's next reading shows this recovery before it writes: from
                # then on they refuse the partition's writes as this one does.
                await asyncio.sleep(self._recovering.notice_s)
            async for batch in batches:
                if lease is not None:
                    lease.check()
                missing, started = self._to_write(partition, batch, register=not dry_run)
                await self._checked_against_store(missing + started)
                if not dry_run:
                    await self._write_recovered(partition, missing, started)
                written += (s.remote_log_segment_id for s in missing)
                completed += (s.remote_log_segment_id for s in started)
        if not dry_run and partition in self._awaiting_recovery:
            self._awaiting_recovery.discard(partition)
            directory = Path(self.config.snapshot_dir).expanduser()
            async with self._awaiting_written:
                awaiting = set(self._awaiting_recovery)
                await asyncio.to_thread(awaiting_recovery.write, directory, awaiting)
            log.info("%s recovered: ready again", partition)
        return RecoveredSegments(tuple(written), tuple(completed))

    async def _checked_against_store(self, segments: list[RemoteLogSegmentMetadata]) -> None:
        """Each segment as the store's manifest of it describes it, or the whole batch is
        refused naming the first that is not: a segment with no whole copy in the store
        would fail every fetch of it, and count toward retention.bytes."""
        if not segments:
            return
        describer = self._segments
        if describer is None:
            raise ServiceUnavailableError(
                "RecoverRemoteLogSegments needs the segment store (segment.store.address) to "
                "check each segment against its manifest"
            )
        field = "remote_log_segment_metadata"

        async def check(segment: RemoteLogSegmentMetadata) -> None:
            segment_id = segment.remote_log_segment_id.id
            try:
                described, custom = await describer.describe_log_segment(segment)
            except RemoteResourceNotFoundError:
                raise InvalidArgumentError(
                    field,
                    f"segment {segment_id}: the segment store holds no manifest of it (no whole "
                    "copy), so it is not written",
                ) from None
            stored = replace(described, state=segment.state, custom_metadata=custom)
            for name in (f.name for f in fields(segment)):
                sent, held = getattr(segment, name), getattr(stored, name)
                if sent != held:
                    raise InvalidArgumentError(
                        f"{field}.{name}",
                        f"segment {segment_id}: is {sent!r}, its manifest in the store says "
                        f"{held!r}",
                    )

        await bounded_gather((functools.partial(check, s) for s in segments), 16)

    def _to_write(
        self,
        partition: TopicIdPartition,
        batch: Sequence[RemoteLogSegmentMetadata],
        *,
        register: bool,
    ) -> tuple[list[RemoteLogSegmentMetadata], list[RemoteLogSegmentMetadata]]:
        """Of the batch, checked whole first, the segments not known, and those known
        only as COPY_SEGMENT_STARTED."""
        field = "remote_log_segment_metadata"
        for segment in batch:
            if segment.topic_id_partition != partition:
                raise InvalidArgumentError(
                    field, f"segment {segment.remote_log_segment_id} is not of {partition}"
                )
            if segment.state is not RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                raise InvalidArgumentError(
                    f"{field}.state",
                    f"a recovered segment is COPY_SEGMENT_FINISHED, not {segment.state.name}",
                )
            check_custom_metadata_size(
                segment.custom_metadata, self.config.custom_metadata_max_bytes
            )
        state = self.store.ready(partition, register=register)
        _refuse_new_segments(state, partition)
        cache = state.cache(partition)
        missing: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        started: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        for segment in batch:
            segment_id = segment.remote_log_segment_id
            known = None if cache is None else cache.segment_state(segment_id.id.bytes)
            if known is None:
                missing.setdefault(segment_id, segment)
            elif known is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                started.setdefault(segment_id, segment)
        return list(missing.values()), list(started.values())

    async def _write_recovered(
        self,
        partition: TopicIdPartition,
        missing: list[RemoteLogSegmentMetadata],
        started: list[RemoteLogSegmentMetadata],
    ) -> None:
        """The missing segments' two records each, and the started ones' FINISHED, all
        sent before any is awaited (the producer keeps their order on the one metadata
        partition) and confirmed together."""
        events: list[RemoteLogMetadata] = []
        for segment in missing:
            events.append(
                replace(
                    segment, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED, custom_metadata=None
                )
            )
            events.append(_finished(segment))
        events += (_finished(segment) for segment in started)
        metadata_part = self.store.metadata_partition(partition)
        # Tasks start in order, and each sends its record before its first wait.
        await asyncio.gather(*(self.producer.publish(metadata_part, e) for e in events))

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


async def open_metadata_manager(
    config: MetadataManagerConfig,
    *,
    topic: str = METADATA_TOPIC,
    segments: SegmentDescriber | None = None,
) -> TopicBasedRemoteLogMetadataManager:
    """The manager, started, with the Kafka clients it is handed: the metadata topic made
    or checked first, the snapshot loaded, then its producer and consumer."""
    client_config = kafka_client_config(config)
    waits = {
        "topic": topic,
        "partitions": config.metadata_topic_num_partitions,
        "retry_interval_ms": config.initialization_retry_interval_ms,
        "max_timeout_ms": config.initialization_retry_max_timeout_ms,
    }
    if config.read_only:
        # The topic is its writer's to create, with its settings.
        info = await in_thread_until_cancelled(await_metadata_topic, client_config, **waits)
    else:
        info = await in_thread_until_cancelled(
            ensure_metadata_topic,
            client_config,
            replication_factor=config.metadata_topic_replication_factor,
            retention_ms=config.metadata_topic_retention_ms,
            **waits,
        )
    snapshot = load_snapshot(config, info, topic)
    producer: Producer = (
        NoProducer()
        if config.read_only
        else MetadataProducer(client_config, topic=topic, timeout_ms=config.consume_wait_ms)
    )
    manager: TopicBasedRemoteLogMetadataManager | None = None

    def sink(records: list[Record], ends: list[EndOfPartition]) -> None:
        assert manager is not None  # records come only once the manager started the consumer
        manager.store.on_records(records, ends)

    consumer = MetadataConsumer(
        client_config,
        topic=topic,
        loop=asyncio.get_running_loop(),
        sink=sink,
        fetch_wait_ms=config.consumer_fetch_wait_ms,
    )
    manager = TopicBasedRemoteLogMetadataManager(
        config,
        info,
        producer,
        consumer,
        topic_name=topic,
        snapshot=snapshot,
        recoveries=open_leases(config.redis_url),
        segments=segments,
    )
    try:
        await manager.start()
    except BaseException:
        await manager.close()
        raise
    return manager


def load_snapshot(config: MetadataManagerConfig, topic: TopicInfo, name: str) -> LoadedSnapshot:
    """The snapshot in `remote.log.metadata.snapshot.dir`, if it is of this topic as it is
    now; one that is not is discarded, and the topic replayed from the beginning."""
    directory = Path(config.snapshot_dir).expanduser()

    def discard(why: str) -> LoadedSnapshot:
        log.warning("discarding metadata snapshot in %s: %s; replaying %s", directory, why, name)
        return LoadedSnapshot(status=f"discarded: {why}")

    try:
        loaded = snapshots.load(directory)
    except snapshots.SnapshotError as exc:
        return discard(str(exc))
    if loaded is None:
        return LoadedSnapshot()
    if loaded.topic_id != topic.topic_id:
        discarded = discard(
            f"it is of topic id {loaded.topic_id}, the topic now has {topic.topic_id} "
            "(deleted and recreated)"
        )
        lost = awaiting_recovery.lost_partitions(loaded.states.values())
        return replace(discarded, lost=frozenset(lost))
    if loaded.num_partitions != topic.partitions:
        return discard(
            f"it has {loaded.num_partitions} metadata partitions, the topic {topic.partitions}"
        )
    log.info(
        "loaded metadata snapshot: %d metadata partitions, %d segments",
        len(loaded.states),
        sum(state.segment_count() for state in loaded.states.values()),
    )
    return LoadedSnapshot(dict(loaded.states), loaded.registered, "loaded")


def _check_segment_transition(
    current: RemoteLogSegmentState | None, target: RemoteLogSegmentState, event: object
) -> None:
    if not is_valid_segment_transition(current, target):
        segment = getattr(event, "remote_log_segment_id", "")
        raise InvalidStateTransitionError(
            f"segment {segment}: {current.name if current else 'no state'} can not move to "
            f"{target.name}"
        )


_RECOVERY_LEASES = "recover:"


def _recovery_lease(partition: TopicIdPartition) -> str:
    return f"{_RECOVERY_LEASES}{partition.topic_id}:{partition.partition}"


def _refuse_new_segments(state: MetadataPartitionState, tip: TopicIdPartition) -> None:
    """No new segment of a partition deleted or being deleted: the remover lists the
    segments to delete after its marker, and one added later would outlive the partition
    as an orphan."""
    refuse_deleted(state, tip)
    being_deleted = state.deletes.get(tip)
    if being_deleted is not None:
        raise InvalidStateTransitionError(
            f"partition {tip} is {being_deleted.state.name}: no new segments"
        )


def _finished(segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    """The COPY_SEGMENT_FINISHED of a segment's copy, by its broker at its time."""
    return RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=segment.remote_log_segment_id,
        event_timestamp_ms=segment.event_timestamp_ms,
        custom_metadata=segment.custom_metadata,
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        broker_id=segment.broker_id,
    )
