"""Recovery's side of the metadata manager (not Kafka's): a partition's segments written
back from the store's manifests (RecoverRemoteLogSegments), and the partitions that are
not ready meanwhile.

A partition is not ready while a recovery holds its lease (in Redis, shared by every
instance, when `redis.url` is set), and from a start that found the metadata topic lost
(its snapshot was of another topic id) until a recovery of it has run through this
manager. Who holds which lease is read in the background (HeldNames): IsReady and the
writes never wait on Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterable, Sequence
from dataclasses import fields, replace
from pathlib import Path

from remotelog.coordination.held_names import HeldNames
from remotelog.coordination.lease import Lease, Leases, held
from remotelog.core.errors import (
    InvalidArgumentError,
    MetadataNotReadyError,
    RecoveryInProgressError,
    RemoteResourceNotFoundError,
    ServiceUnavailableError,
)
from remotelog.core.model import (
    RecoveredSegments,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
    check_custom_metadata_size,
)
from remotelog.core.ports import SegmentDescriber
from remotelog.core.states import RemoteLogSegmentState
from remotelog.core.tasks import bounded_gather
from remotelog.metadata import awaiting_recovery
from remotelog.metadata.config import MetadataManagerConfig, refuse_write
from remotelog.metadata.partition_store import RemotePartitionMetadataStore, refuse_new_segments
from remotelog.metadata.producer_manager import ProducerManager

log = logging.getLogger("remotelog.metadata.manager")
# A partition's recovery lease lives this long past its holder's last renewal (every
# third of it while the recovery's stream is open): a recovery whose manager died
# leaves the partition ready again within it.
RECOVERY_LEASE_MS = 30_000
# How often a manager reads who is recovering which partition.
RECOVERY_WATCH_S = 0.5
_RECOVERY_LEASES = "recover:"


def recovery_lease(partition: TopicIdPartition) -> str:
    return f"{_RECOVERY_LEASES}{partition.topic_id}:{partition.partition}"


class Recoveries:
    def __init__(
        self,
        config: MetadataManagerConfig,
        store: RemotePartitionMetadataStore,
        producer: ProducerManager,
        leases: Leases,
        describer: SegmentDescriber | None,
        lost: frozenset[TopicIdPartition],
    ) -> None:
        self.config = config
        self.store = store
        self.producer = producer
        self._leases = leases
        # The store whose manifests a recovery's segments must match to be written.
        self._describer = describer
        self._recovering = HeldNames(
            leases,
            _RECOVERY_LEASES,
            interval_s=RECOVERY_WATCH_S,
            forget_after_s=RECOVERY_LEASE_MS / 1000,
        )
        self.awaiting = self._awaited_at_start(lost)
        self._awaiting_written = asyncio.Lock()  # recoveries of several partitions end at once
        # How often each of them was answered not ready (tests wait on a broker asking).
        self.awaited: dict[TopicIdPartition, int] = {}

    def start(self) -> None:
        self._recovering.start()

    async def close(self) -> None:
        await self._recovering.close()
        await self._leases.close()

    def not_ready(self, partition: TopicIdPartition) -> bool:
        """Awaiting a recovery since the topic was lost, or being recovered."""
        if partition in self.awaiting:
            self.awaited[partition] = self.awaited.get(partition, 0) + 1
            return True
        return self.recovered_by(partition) is not None

    def _awaited_at_start(self, lost: frozenset[TopicIdPartition]) -> set[TopicIdPartition]:
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
        return self._recovering.holder(recovery_lease(partition))

    async def refuse_if_recovering(self, partition: TopicIdPartition) -> None:
        """A write of a partition being recovered is refused as not ready: Kafka's plugin
        then asks IsReady again, which says no until the recovery ends."""
        if partition in self.awaiting:
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
        if not dry_run and self.config.read_only:
            raise refuse_write("RecoverRemoteLogSegments")
        written: list[RemoteLogSegmentId] = []
        completed: list[RemoteLogSegmentId] = []
        lease: Lease | None = None
        async with contextlib.AsyncExitStack() as stack:
            if not dry_run:
                name = recovery_lease(partition)
                lease = await stack.enter_async_context(
                    held(self._leases, name, recovery, RECOVERY_LEASE_MS)
                )
                if lease is None:
                    holder = await self._leases.holder(name) or "another recovery"
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
        if not dry_run and partition in self.awaiting:
            self.awaiting.discard(partition)
            directory = Path(self.config.snapshot_dir).expanduser()
            async with self._awaiting_written:
                awaiting = set(self.awaiting)
                await asyncio.to_thread(awaiting_recovery.write, directory, awaiting)
            log.info("%s recovered: ready again", partition)
        return RecoveredSegments(tuple(written), tuple(completed))

    async def _checked_against_store(self, segments: list[RemoteLogSegmentMetadata]) -> None:
        """Each segment as the store's manifest of it describes it, or the whole batch is
        refused naming the first that is not: a segment with no whole copy in the store
        would fail every fetch of it, and count toward retention.bytes."""
        if not segments:
            return
        describer = self._describer
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
        refuse_new_segments(state, partition)
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


def _finished(segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    """The COPY_SEGMENT_FINISHED of a segment's copy, by its broker at its time."""
    return RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=segment.remote_log_segment_id,
        event_timestamp_ms=segment.event_timestamp_ms,
        custom_metadata=segment.custom_metadata,
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        broker_id=segment.broker_id,
    )
