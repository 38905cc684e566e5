"""TopicBasedRemoteLogMetadataManager: Kafka's RLMM over `__remote_log_metadata`, asyncio.

- Registration (`on_partition_leadership_changes`, or the first read or write
  of a partition) assigns the partition's metadata partition to the consumer,
  from the snapshot's offset when there is one, else from the beginning.
- A user partition is ready once its metadata partition reached its end
  after being assigned; until then reads and writes raise MetadataNotReadyError.
- Writes are checked against the cache (state transitions, custom metadata
  size), published, and return only once the cache holds them, within
  `consume.wait.ms`: Kafka waits until its consumer has read the record back
  (waitTillConsumptionCatchesUp). Here an acknowledged write whose offset is
  the next one to apply is applied from the bytes this instance sent, as the
  consumer would apply them, and the consumer skips it later; a write behind
  records not consumed yet (another instance's) waits for them. The cache
  sees every record once, in offset order, either way, and a write returns
  after its acknowledgement instead of a consumer fetch later (one wait of
  `consumer.fetch.max.wait.ms` on brokers that answer a fetch only when its
  wait ends, as Tansu does). An event the cache dropped on the way (a
  concurrent writer won) is reported as INVALID_STATE_TRANSITION, not as
  success.
- A snapshot of all materialised state is written every N events or T ms and
  at close; a restart loads it and consumes only what came after.

All state is touched by the event loop thread alone; the Kafka clients'
threads hand records over through `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.metrics import Observation

from remotelog.core.deadline import current_deadline
from remotelog.core.errors import (
    InvalidArgumentError,
    InvalidStateTransitionError,
    MetadataNotReadyError,
    MetadataTopicUnavailableError,
    RemoteResourceNotFoundError,
)
from remotelog.core.gauges import InstanceGauges
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.metadata_serde import serialize
from remotelog.core.metrics import (
    METADATA_READ_LATENCY,
    METADATA_SEGMENTS,
    METADATA_WRITE_LATENCY,
    histogram,
)
from remotelog.core.model import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionSummary,
    TopicIdPartition,
    check_custom_metadata_size,
)
from remotelog.core.partitioner import metadata_partition
from remotelog.core.states import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    is_valid_partition_delete_transition,
    is_valid_segment_transition,
)
from remotelog.core.tasks import in_thread_until_cancelled
from remotelog.metadata import snapshot as snapshots
from remotelog.metadata.cache import RemoteLogMetadataCache
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.partition_state import MetadataPartitionState
from remotelog.metadata.topic import (
    METADATA_TOPIC,
    OFFSET_BEGINNING,
    EndOfPartition,
    MetadataConsumer,
    MetadataProducer,
    Record,
    TopicInfo,
    ensure_metadata_topic,
    parse_record,
)

log = logging.getLogger(__name__)
SCOPE = "remotelog.metadata"
# A write's acknowledgement lags its consumption by at most the writes in flight.
RECENT_DROPS_KEPT = 1024


@dataclass
class _Assigned:
    """A metadata partition this instance consumes."""

    state: MetadataPartitionState
    generation: int
    caught_up: bool = False
    # offset -> futures of writes waiting to see that offset consumed
    waiters: dict[int, list[asyncio.Future[str | None]]] = field(default_factory=dict)
    # offset -> why, for events dropped before their writer started waiting: the
    # consumer can apply a write before the producer's acknowledgement arrives.
    recent_drops: dict[int, str] = field(default_factory=dict)
    # offset -> value of this instance's acknowledged writes not applied yet
    own_writes: dict[int, bytes] = field(default_factory=dict)

    def remember_drop(self, offset: int, why: str) -> None:
        self.recent_drops[offset] = why
        if len(self.recent_drops) > RECENT_DROPS_KEPT:
            del self.recent_drops[next(iter(self.recent_drops))]  # offsets arrive in order


class TopicBasedRemoteLogMetadataManager:
    def __init__(self, config: MetadataManagerConfig, *, topic: str = METADATA_TOPIC) -> None:
        self.config = config
        self.topic_name = topic
        self._read_latency = histogram(SCOPE, METADATA_READ_LATENCY)
        self._write_latency = histogram(SCOPE, METADATA_WRITE_LATENCY)
        self.client_config: dict[str, Any] = kafka_client_config(config)
        self.topic: TopicInfo | None = None
        # How the last start went with the snapshot: "none", "loaded", "discarded: <why>".
        self.snapshot_status = "none"
        self._assigned: dict[int, _Assigned] = {}
        # States loaded from the snapshot whose metadata partition is not assigned (yet).
        self._parked: dict[int, MetadataPartitionState] = {}
        self._registered: set[TopicIdPartition] = set()
        # Set by the first partition listing: every metadata partition stays assigned.
        self._discovering = False
        self._generations = itertools.count(1)
        self._events_since_snapshot = 0
        # Records applied since start (a restart from a snapshot applies only the tail).
        self.events_applied = 0
        self._snapshot_due = asyncio.Event()
        self._snapshot_task: asyncio.Task[None] | None = None
        self._producer: MetadataProducer | None = None
        self._consumer: MetadataConsumer | None = None
        self._closed = False
        self._gauges: InstanceGauges | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        c = self.config
        self.topic = await in_thread_until_cancelled(
            ensure_metadata_topic,
            self.client_config,
            topic=self.topic_name,
            partitions=c.metadata_topic_num_partitions,
            replication_factor=c.metadata_topic_replication_factor,
            retention_ms=c.metadata_topic_retention_ms,
            retry_interval_ms=c.initialization_retry_interval_ms,
            max_timeout_ms=c.initialization_retry_max_timeout_ms,
        )
        registered = self._load_snapshot(self.topic)
        self._producer = MetadataProducer(
            self.client_config, topic=self.topic_name, timeout_ms=c.consume_wait_ms
        )
        self._consumer = MetadataConsumer(
            self.client_config,
            topic=self.topic_name,
            loop=asyncio.get_running_loop(),
            sink=self._on_records,
            fetch_wait_ms=c.consumer_fetch_wait_ms,
        )
        self._consumer.start()
        for tip in registered:
            self._register(tip)
        self._snapshot_task = asyncio.create_task(self._snapshot_loop())
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
        if self._consumer is not None:
            await asyncio.to_thread(self._consumer.close)
        if self._producer is not None:
            await asyncio.to_thread(self._producer.close)
        if self.topic is not None:
            await self.write_snapshot()
        for assigned in self._assigned.values():
            _fail_waiters(assigned, "the metadata manager is shutting down")

    def _load_snapshot(self, topic: TopicInfo) -> frozenset[TopicIdPartition]:
        directory = Path(self.config.snapshot_dir).expanduser()
        try:
            loaded = snapshots.load(directory)
        except snapshots.SnapshotError as exc:
            return self._discard_snapshot(directory, str(exc))
        if loaded is None:
            return frozenset()
        if loaded.topic_id != topic.topic_id:
            return self._discard_snapshot(
                directory,
                f"it is of topic id {loaded.topic_id}, the topic now has {topic.topic_id} "
                "(deleted and recreated)",
            )
        if loaded.num_partitions != topic.partitions:
            return self._discard_snapshot(
                directory,
                f"it has {loaded.num_partitions} metadata partitions, the topic {topic.partitions}",
            )
        self._parked = dict(loaded.states)
        self.snapshot_status = "loaded"
        log.info(
            "loaded metadata snapshot: %d metadata partitions, %d segments",
            len(loaded.states),
            sum(state.segment_count() for state in loaded.states.values()),
        )
        return loaded.registered

    def _discard_snapshot(self, directory: Path, why: str) -> frozenset[TopicIdPartition]:
        self.snapshot_status = f"discarded: {why}"
        log.warning(
            "discarding metadata snapshot in %s: %s; replaying %s", directory, why, self.topic_name
        )
        return frozenset()

    # -- registration and readiness ------------------------------------------------

    def on_partition_leadership_changes(
        self, leaders: Iterable[TopicIdPartition], followers: Iterable[TopicIdPartition]
    ) -> None:
        for tip in itertools.chain(leaders, followers):
            self._register(tip)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        stopped = set(partitions) & self._registered
        self._registered -= stopped
        if self._discovering:
            return  # every metadata partition is served for the listing
        still_served = {self._metadata_partition(tip) for tip in self._registered}
        for metadata_part in {self._metadata_partition(tip) for tip in stopped} - still_served:
            assigned = self._assigned.pop(metadata_part, None)
            if assigned is not None:
                assert self._consumer is not None
                self._consumer.unassign(metadata_part)
                _fail_waiters(assigned, "the partition is no longer served here")

    def is_ready(self, tip: TopicIdPartition) -> bool:
        return self._assigned_for(tip).caught_up

    def registered_partitions(self) -> frozenset[TopicIdPartition]:
        return frozenset(self._registered)

    def _metadata_partition(self, tip: TopicIdPartition) -> int:
        return metadata_partition(tip, self.config.metadata_topic_num_partitions)

    def _register(self, tip: TopicIdPartition) -> _Assigned:
        assigned = self._assign(self._metadata_partition(tip))
        self._registered.add(tip)
        return assigned

    def _assign(self, metadata_part: int) -> _Assigned:
        if self._closed:
            raise MetadataNotReadyError("the metadata manager is not running")
        assigned = self._assigned.get(metadata_part)
        if assigned is not None:
            return assigned
        if self._consumer is None:
            raise MetadataNotReadyError("the metadata manager is not running")
        state = self._parked.pop(metadata_part, None) or MetadataPartitionState(metadata_part)
        assigned = _Assigned(state, next(self._generations))
        self._assigned[metadata_part] = assigned
        start = state.next_offset if state.next_offset > 0 else OFFSET_BEGINNING
        self._consumer.assign(metadata_part, start, assigned.generation)
        return assigned

    def _assigned_for(self, tip: TopicIdPartition, *, register: bool = False) -> _Assigned:
        # A read assigns the metadata partition that holds `tip` (at most the topic's
        # partition count of them) but registers nothing: reads of arbitrary
        # partitions must not grow the registered set, or the snapshot, without bound.
        # A write registers its partition, as it creates state there anyway.
        if register:
            return self._register(tip)
        return self._assign(self._metadata_partition(tip))

    def _ready(self, tip: TopicIdPartition, *, register: bool = False) -> MetadataPartitionState:
        assigned = self._assigned_for(tip, register=register)
        if not assigned.caught_up:
            raise MetadataNotReadyError(
                f"metadata of {tip} is loading from {self.topic_name}-{assigned.state.partition}",
                metadata={"partition": str(tip)},
            )
        return assigned.state

    # -- consumption (event loop thread) --------------------------------------------

    def _on_records(self, records: list[Record], ends: list[EndOfPartition]) -> None:
        touched: set[int] = set()
        applied = 0
        for metadata_part, generation, offset, event in records:
            assigned = self._assigned.get(metadata_part)
            if assigned is None or assigned.generation != generation:
                continue
            if offset < assigned.state.next_offset:
                continue  # applied already (this instance's own write)
            self._apply(assigned, offset, event)
            applied += 1
            touched.add(metadata_part)
        for metadata_part, generation, end in ends:
            assigned = self._assigned.get(metadata_part)
            if assigned is None or assigned.generation != generation:
                continue
            # Past the end, there is nothing more to apply: offsets up to it
            # (control records, gaps) are consumed too.
            assigned.state.next_offset = max(assigned.state.next_offset, end)
            if not assigned.caught_up:
                assigned.caught_up = True
                log.info("%s-%d caught up at offset %d", self.topic_name, metadata_part, end)
            touched.add(metadata_part)
        for metadata_part in touched:
            assigned = self._assigned[metadata_part]
            applied += self._apply_own_writes(assigned)
            self._release_waiters(assigned)
        self._count_applied(applied)

    def _count_applied(self, applied: int) -> None:
        self.events_applied += applied
        self._events_since_snapshot += applied
        if self._events_since_snapshot >= self.config.snapshot_interval_events:
            self._snapshot_due.set()

    def _apply(self, assigned: _Assigned, offset: int, event: RemoteLogMetadata | None) -> None:
        """Apply the record at `offset` (the next one) and answer the writes waiting for it."""
        state = assigned.state
        if event is None:
            state.next_offset = offset + 1
            dropped: str | None = "unreadable record"
        else:
            dropped = state.apply(offset, event)
            if dropped is not None:
                log.warning(
                    "dropped %s at %s-%d@%d: %s",
                    type(event).__name__,
                    self.topic_name,
                    state.partition,
                    offset,
                    dropped,
                )
        waiting = assigned.waiters.pop(offset, None)
        if waiting is None and dropped is not None:
            assigned.remember_drop(offset, dropped)
        for future in waiting or ():
            if not future.done():
                future.set_result(dropped)

    def _apply_own_writes(self, assigned: _Assigned) -> int:
        """Apply this instance's acknowledged writes that are next in offset order."""
        state, own = assigned.state, assigned.own_writes
        for offset in [o for o in own if o < state.next_offset]:
            del own[offset]  # the consumer applied it first
        applied = 0
        while (value := own.pop(state.next_offset, None)) is not None:
            offset = state.next_offset
            where = f"{self.topic_name}-{state.partition} offset {offset}"
            self._apply(assigned, offset, parse_record(value, where))
            applied += 1
        return applied

    @staticmethod
    def _release_waiters(assigned: _Assigned) -> None:
        consumed = assigned.state.next_offset
        for offset in [o for o in assigned.waiters if o < consumed]:
            for future in assigned.waiters.pop(offset):
                if not future.done():
                    future.set_result(None)

    # -- writes -----------------------------------------------------------------------

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidArgumentError(
                "remote_log_segment_metadata.state",
                f"a new segment must be COPY_SEGMENT_STARTED, not {metadata.state.name}",
            )
        check_custom_metadata_size(metadata.custom_metadata, self.config.custom_metadata_max_bytes)
        tip = metadata.topic_id_partition
        state = self._ready(tip, register=True)
        self._refuse_deleted(state, tip)
        being_deleted = state.deletes.get(tip)
        if being_deleted is not None:
            # The remover lists the segments to delete after the marker; a copy
            # that starts now would outlive the partition as an orphan.
            raise InvalidStateTransitionError(
                f"partition {tip} is {being_deleted.state.name}: no new segments"
            )
        cache = state.cache(tip)
        current = (
            None if cache is None else cache.segment_state(metadata.remote_log_segment_id.id.bytes)
        )
        _check_segment_transition(current, metadata.state, metadata)
        await self._publish(state, metadata)

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> None:
        if update.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidArgumentError(
                "remote_log_segment_metadata_update.state",
                "an update can not move a segment to COPY_SEGMENT_STARTED; add it instead",
            )
        check_custom_metadata_size(update.custom_metadata, self.config.custom_metadata_max_bytes)
        tip = update.topic_id_partition
        state = self._ready(tip, register=True)
        self._refuse_deleted(state, tip)
        cache = state.cache(tip)
        current = (
            None if cache is None else cache.segment_state(update.remote_log_segment_id.id.bytes)
        )
        if current is None:
            raise RemoteResourceNotFoundError(
                f"no remote log segment metadata for {update.remote_log_segment_id}"
            )
        _check_segment_transition(current, update.state, update)
        await self._publish(state, update)

    async def put_remote_partition_delete_metadata(
        self, delete: RemotePartitionDeleteMetadata
    ) -> None:
        tip = delete.topic_id_partition
        state = self._ready(tip, register=True)
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
        await self._publish(state, delete)

    @staticmethod
    def _refuse_deleted(state: MetadataPartitionState, tip: TopicIdPartition) -> None:
        if tip in state.deleted:
            raise RemoteResourceNotFoundError(f"partition {tip} was deleted")

    async def _publish(self, state: MetadataPartitionState, event: RemoteLogMetadata) -> None:
        started = time.perf_counter()
        assert self._producer is not None
        wait_s = self.config.consume_wait_ms / 1000
        deadline = current_deadline()
        if deadline is not None:
            wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
        value = serialize(event)
        metadata_part = state.partition
        try:
            async with asyncio.timeout(wait_s):
                offset = await self._producer.publish(metadata_part, value)
                dropped = await self._consumed(metadata_part, offset, value)
        except TimeoutError:
            raise MetadataTopicUnavailableError(
                f"{self.topic_name}-{metadata_part} did not confirm the write within "
                f"{wait_s * 1000:.0f} ms (remote.log.metadata.consume.wait.ms); it may still "
                "land: retry"
            ) from None
        finally:
            self._write_latency.record((time.perf_counter() - started) * 1000)
        if dropped is not None:
            raise InvalidStateTransitionError(f"the event was not applied: {dropped}")

    async def _consumed(self, metadata_part: int, offset: int, value: bytes) -> str | None:
        """Once the record written at `offset` is applied: why it was dropped, or None."""
        assigned = self._assigned.get(metadata_part)
        if assigned is None:
            raise MetadataNotReadyError("the partition is no longer served here")
        if offset < assigned.state.next_offset:
            return assigned.recent_drops.get(offset)
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        assigned.waiters.setdefault(offset, []).append(future)
        assigned.own_writes[offset] = value
        self._count_applied(self._apply_own_writes(assigned))
        self._release_waiters(assigned)
        return await future

    # -- reads ------------------------------------------------------------------------

    def _read_cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        state = self._ready(tip)
        self._refuse_deleted(state, tip)
        return state.cache(tip) or RemoteLogMetadataCache(tip)

    @contextlib.contextmanager
    def _timed_read(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._read_latency.record((time.perf_counter() - started) * 1000)

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with self._timed_read():
            return self._read_cache(tip).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        with self._timed_read():
            return self._read_cache(tip).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        with self._timed_read():
            return self._read_cache(tip).list_remote_log_segments(leader_epoch)

    def remote_log_size(self, tip: TopicIdPartition, leader_epoch: int) -> int:
        with self._timed_read():
            return self._read_cache(tip).remote_log_size(leader_epoch)

    def next_segment_with_txn_index(
        self, tip: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        with self._timed_read():
            return self._read_cache(tip).next_segment_with_txn_index(leader_epoch, offset)

    def partition_delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        """The partition's deletion state; FINISHED once its cache is dropped."""
        state = self._ready(tip)
        if tip in state.deleted:
            return RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        current = state.deletes.get(tip)
        return None if current is None else current.state

    def list_remote_partitions(self, topic: str | None = None) -> list[RemotePartitionSummary]:
        """Every user partition (of `topic`, or all) with COPY_SEGMENT_FINISHED segments,
        by topic, partition and topic id. A partition whose deletion has begun is not
        listed: for a reader its topic is gone.

        Discovery needs the whole topic: the first call assigns every metadata
        partition, for good, and raises MetadataNotReadyError until each is caught up.
        """
        self._discovering = True
        for metadata_part in range(self.config.metadata_topic_num_partitions):
            self._assign(metadata_part)
        loading = sorted(p for p, a in self._assigned.items() if not a.caught_up)
        if loading:
            raise MetadataNotReadyError(
                f"{len(loading)} partitions of {self.topic_name} are loading "
                f"(first: {self.topic_name}-{loading[0]})"
            )
        found = []
        with self._timed_read():
            for assigned in self._assigned.values():
                state = assigned.state
                for tip, cache in state.caches.items():
                    if (topic is not None and tip.topic != topic) or tip in state.deletes:
                        continue
                    summary = cache.summary()
                    if summary is not None:
                        found.append(summary)
        return sorted(
            found,
            key=lambda s: (
                s.topic_id_partition.topic,
                s.topic_id_partition.partition,
                s.topic_id_partition.topic_id,
            ),
        )

    def segment_count(self) -> int:
        return sum(a.state.segment_count() for a in self._assigned.values())

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
        assert self.topic is not None
        self._events_since_snapshot = 0
        states = snapshots.copy_states(
            itertools.chain((a.state for a in self._assigned.values()), self._parked.values())
        )
        snapshot = snapshots.Snapshot(
            topic_id=self.topic.topic_id,
            num_partitions=self.topic.partitions,
            registered=frozenset(self._registered),
            states=states,
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


def _fail_waiters(assigned: _Assigned, why: str) -> None:
    for futures in assigned.waiters.values():
        for future in futures:
            if not future.done():
                future.set_exception(MetadataNotReadyError(why))
    assigned.waiters.clear()
