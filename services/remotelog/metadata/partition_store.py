"""The metadata this instance materialised, per metadata partition it consumes (Kafka's
RemotePartitionMetadataStore, with ConsumerTask's bookkeeping of what is assigned).

- Registration (a leadership change, or the first write of a partition) assigns
  the partition's metadata partition to the consumer, from the snapshot's offset
  when there is one, else from the beginning. A read assigns it too, without
  registering: reads of arbitrary partitions must not grow the registered set.
- A user partition is ready once its metadata partition reached its end after
  being assigned; until then it raises MetadataNotReadyError.
- Records are applied once each, in offset order: the consumer's, and this
  instance's own acknowledged writes when they are next (see producer_manager).

All state is touched by the event loop thread alone.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from remotelog.core.errors import (
    InvalidStateTransitionError,
    MetadataNotReadyError,
    RemoteResourceNotFoundError,
)
from remotelog.core.model import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionSummary,
    TopicIdPartition,
)
from remotelog.core.partitioner import metadata_partition
from remotelog.core.states import RemoteLogSegmentState, RemotePartitionDeleteState
from remotelog.metadata.cache import RemoteLogMetadataCache
from remotelog.metadata.partition_state import MetadataPartitionState
from remotelog.metadata.topic import OFFSET_BEGINNING, EndOfPartition, Record, parse_record

log = logging.getLogger(__name__)
# A write's acknowledgement lags its consumption by at most the writes in flight.
RECENT_DROPS_KEPT = 1024


class Assignments(Protocol):
    """What the store asks of the metadata consumer (topic.MetadataConsumer)."""

    def assign(self, partition: int, offset: int, generation: int) -> None: ...

    def unassign(self, partition: int) -> None: ...


@dataclass
class Assigned:
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

    def fail_waiters(self, why: str) -> None:
        for futures in self.waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(MetadataNotReadyError(why))
        self.waiters.clear()


class RemotePartitionMetadataStore:
    def __init__(
        self,
        topic_name: str,
        num_partitions: int,
        assignments: Assignments,
        *,
        parked: dict[int, MetadataPartitionState] | None = None,
        on_applied: Callable[[int], None] = lambda _: None,
    ) -> None:
        self.topic_name = topic_name
        self.num_partitions = num_partitions
        self.assignments = assignments
        self.on_applied = on_applied  # told how many records each batch applied
        self.assigned: dict[int, Assigned] = {}
        # States loaded from the snapshot whose metadata partition is not assigned (yet).
        self.parked = dict(parked or {})
        self.registered: set[TopicIdPartition] = set()
        # Set by the first partition listing: every metadata partition stays assigned.
        self._discovering = False
        self._generations = itertools.count(1)
        self.closed = False

    # -- assignment and readiness ----------------------------------------------------

    def metadata_partition(self, tip: TopicIdPartition) -> int:
        return metadata_partition(tip, self.num_partitions)

    def register(self, tip: TopicIdPartition) -> Assigned:
        assigned = self.assign(self.metadata_partition(tip))
        self.registered.add(tip)
        return assigned

    def assign(self, metadata_part: int) -> Assigned:
        if self.closed:
            raise MetadataNotReadyError("the metadata manager is not running")
        assigned = self.assigned.get(metadata_part)
        if assigned is not None:
            return assigned
        state = self.parked.pop(metadata_part, None) or MetadataPartitionState(metadata_part)
        assigned = Assigned(state, next(self._generations))
        self.assigned[metadata_part] = assigned
        start = state.next_offset if state.next_offset > 0 else OFFSET_BEGINNING
        self.assignments.assign(metadata_part, start, assigned.generation)
        return assigned

    def stop(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Unregister `partitions`; a metadata partition none still needs is unassigned."""
        stopped = set(partitions) & self.registered
        self.registered -= stopped
        if self._discovering:
            return  # every metadata partition is served for the listing
        still_served = {self.metadata_partition(tip) for tip in self.registered}
        for metadata_part in {self.metadata_partition(tip) for tip in stopped} - still_served:
            assigned = self.assigned.pop(metadata_part, None)
            if assigned is not None:
                self.assignments.unassign(metadata_part)
                assigned.fail_waiters("the partition is no longer served here")

    def is_ready(self, tip: TopicIdPartition) -> bool:
        return self.assign(self.metadata_partition(tip)).caught_up

    def ready(self, tip: TopicIdPartition, *, register: bool = False) -> MetadataPartitionState:
        """The state of `tip`'s metadata partition, caught up; a write registers `tip`, as
        it creates state there anyway."""
        assigned = self.register(tip) if register else self.assign(self.metadata_partition(tip))
        if not assigned.caught_up:
            raise MetadataNotReadyError(
                f"metadata of {tip} is loading from {self.topic_name}-{assigned.state.partition}",
                metadata={"partition": str(tip)},
            )
        return assigned.state

    def close(self, why: str) -> None:
        self.closed = True
        for assigned in self.assigned.values():
            assigned.fail_waiters(why)

    # -- consumption ------------------------------------------------------------------

    def on_records(self, records: list[Record], ends: list[EndOfPartition]) -> None:
        """The consumer's sink: records to apply, and metadata partitions read to their end."""
        touched: set[int] = set()
        applied = 0
        for metadata_part, generation, offset, event in records:
            assigned = self.assigned.get(metadata_part)
            if assigned is None or assigned.generation != generation:
                continue
            if offset < assigned.state.next_offset:
                continue  # applied already (this instance's own write)
            self._apply(assigned, offset, event)
            applied += 1
            touched.add(metadata_part)
        for metadata_part, generation, end in ends:
            assigned = self.assigned.get(metadata_part)
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
            assigned = self.assigned[metadata_part]
            applied += self._apply_own_writes(assigned)
            _release_waiters(assigned)
        self.on_applied(applied)

    async def consumed(self, metadata_part: int, offset: int, value: bytes) -> str | None:
        """Once this instance's write at `offset` (bytes `value`) is applied: why it was
        dropped, or None. It is applied from `value` when it is next in offset order."""
        assigned = self.assigned.get(metadata_part)
        if assigned is None:
            raise MetadataNotReadyError("the partition is no longer served here")
        if offset < assigned.state.next_offset:
            return assigned.recent_drops.get(offset)
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        assigned.waiters.setdefault(offset, []).append(future)
        assigned.own_writes[offset] = value
        self.on_applied(self._apply_own_writes(assigned))
        _release_waiters(assigned)
        return await future

    def _apply(self, assigned: Assigned, offset: int, event: RemoteLogMetadata | None) -> None:
        """Apply the record at `offset` (the next one) and answer the writes waiting for it."""
        state = assigned.state
        if event is None:
            state.next_offset = offset + 1
            dropped: str | None = "unreadable record"
        else:
            dropped = state.apply(offset, event)
            if dropped is not None:
                # What compaction leaves of a deleted segment (KIP-1266): its
                # DELETE_SEGMENT_FINISHED alone, its earlier records gone. Not a fault.
                compacted = (
                    isinstance(event, RemoteLogSegmentMetadataUpdate)
                    and event.state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
                    and not state.knows(event.remote_log_segment_id)
                )
                (log.debug if compacted else log.warning)(
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

    def _apply_own_writes(self, assigned: Assigned) -> int:
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

    # -- reads ------------------------------------------------------------------------

    def cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        state = self.ready(tip)
        refuse_deleted(state, tip)
        return state.cache(tip) or RemoteLogMetadataCache(tip)

    def delete_state(self, tip: TopicIdPartition) -> RemotePartitionDeleteState | None:
        """The partition's deletion state; FINISHED once its cache is dropped."""
        state = self.ready(tip)
        if tip in state.deleted:
            return RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        current = state.deletes.get(tip)
        return None if current is None else current.state

    def list_remote_partitions(self, topic: str | None) -> list[RemotePartitionSummary]:
        """Every user partition (of `topic`, or all) with COPY_SEGMENT_FINISHED segments,
        by topic, partition and topic id. A partition whose deletion has begun is not
        listed: for a reader its topic is gone.

        Discovery needs the whole topic: the first call assigns every metadata
        partition, for good, and raises MetadataNotReadyError until each is caught up.
        """
        self._discovering = True
        for metadata_part in range(self.num_partitions):
            self.assign(metadata_part)
        loading = sorted(p for p, a in self.assigned.items() if not a.caught_up)
        if loading:
            raise MetadataNotReadyError(
                f"{len(loading)} partitions of {self.topic_name} are loading "
                f"(first: {self.topic_name}-{loading[0]})"
            )
        found = []
        for assigned in self.assigned.values():
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
        return sum(a.state.segment_count() for a in self.assigned.values())

    def states(self) -> Iterable[MetadataPartitionState]:
        """Every state held, assigned or parked: what a snapshot keeps."""
        return itertools.chain((a.state for a in self.assigned.values()), self.parked.values())


def refuse_deleted(state: MetadataPartitionState, tip: TopicIdPartition) -> None:
    if tip in state.deleted:
        raise RemoteResourceNotFoundError(f"partition {tip} was deleted")


def refuse_new_segments(state: MetadataPartitionState, tip: TopicIdPartition) -> None:
    """No new segment of a partition deleted or being deleted: the remover lists the
    segments to delete after its marker, and one added later would outlive the partition
    as an orphan."""
    refuse_deleted(state, tip)
    being_deleted = state.deletes.get(tip)
    if being_deleted is not None:
        raise InvalidStateTransitionError(
            f"partition {tip} is {being_deleted.state.name}: no new segments"
        )


def _release_waiters(assigned: Assigned) -> None:
    consumed = assigned.state.next_offset
    for offset in [o for o in assigned.waiters if o < consumed]:
        for future in assigned.waiters.pop(offset):
            if not future.done():
                future.set_result(None)
