"""Recovery: the metadata topic rebuilt from the manifests a store keeps beside each segment.

The store writes a segment's manifest last on copy and deletes it first on delete,
so a manifest names a complete segment and holds its full RemoteLogSegmentMetadata.
Recovery lists the manifests (a partition's keys are contiguous and ascending by
start offset in a listing, S3's and the filesystem store's alike) and hands each
partition's segments to the metadata manager (RecoverRemoteLogSegments), which holds
the partition not ready meanwhile and writes, for each segment it does not know, what
Kafka's RLMM would have written: COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED (for
one it knows only as STARTED, the FINISHED). Other segments it knows are left as they
are, so a second run writes nothing. Objects
without a manifest are not segments (the scrub's); a manifest of a newer version,
or one that cannot be read or disagrees with its key, is reported and skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial

from remotelog.core.deadline import deadline_after
from remotelog.core.errors import (
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from remotelog.core.model import RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.ports import SegmentRecoverer
from remotelog.core.states import RemoteLogSegmentState
from remotelog.core.tasks import bounded_gather, cancel_and_wait, read_ahead
from remotelog.segmentstore.backend import ObjectStore
from remotelog.segmentstore.layout import (
    Manifest,
    SegmentKeys,
    parse_segment_key,
    segment_custom_metadata,
)

MANIFEST_SUFFIX = "rsm-manifest"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A manifest recovery did not use, and why (its key names it)."""

    key: str
    why: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A partition the metadata manager would not take: deleted, or being deleted (the
    leftovers of an earlier incarnation of a topic, whose deletion the topic recorded)."""

    topic_id_partition: TopicIdPartition
    segments: int
    why: str


@dataclass(frozen=True, slots=True)
class NotInCluster:
    """A partition of a topic id the cluster does not have (a deleted incarnation's
    leftovers, another cluster's topic), left unrecovered."""

    topic_id_partition: TopicIdPartition
    segments: int
    # The cluster's id of the topic of that name; None when it has no such topic.
    cluster_topic_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets of a partition no recovered segment holds, between two that do."""

    topic_id_partition: TopicIdPartition
    first_missing: int
    last_missing: int


@dataclass(frozen=True, slots=True)
class Overlap:
    """Two segments holding some of the same offsets (an unclean election, a retried
    copy): both are written; the metadata manager's lineage decides what readers see."""

    earlier: RemoteLogSegmentMetadata
    later: RemoteLogSegmentMetadata


@dataclass
class PartitionRecovery:
    """One partition: its segments found in the store, ascending by start offset."""

    topic_id_partition: TopicIdPartition
    segments: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    # Of those, the ones the metadata manager did not know (written, or in a dry run
    # to be written).
    missing: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    # Known only as COPY_SEGMENT_STARTED (a copy whose last record was lost, a run cut
    # off between a segment's two records): completed, as their manifest shows them.
    completed: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    overlaps: list[Overlap] = field(default_factory=list)


@dataclass
class RecoveryReport:
    """What a run did, in counts: each partition's segments are handed to `on_partition`
    as it is done and not kept, so a run's memory does not grow with the bucket."""

    objects_scanned: int = 0
    partitions: int = 0
    segments_found: int = 0
    # Of those, written (or in a dry run to be written), and completed.
    segments_missing: int = 0
    segments_completed: int = 0
    gaps: int = 0
    overlaps: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    # With the cluster's topic ids given: the partitions of other ids, left.
    not_in_cluster: list[NotInCluster] = field(default_factory=list)
    # Each topic's ids among the partitions recovered or refused.
    topic_ids: dict[str, set[uuid.UUID]] = field(default_factory=dict)
    dry_run: bool = False

    def add(self, recovered: PartitionRecovery) -> None:
        self.partitions += 1
        self.segments_found += len(recovered.segments)
        self.segments_missing += len(recovered.missing)
        self.segments_completed += len(recovered.completed)
        self.gaps += len(recovered.gaps)
        self.overlaps += len(recovered.overlaps)
        self._topic_id(recovered.topic_id_partition)

    def refuse(self, refused: Refused) -> None:
        self.refused.append(refused)
        self._topic_id(refused.topic_id_partition)

    def _topic_id(self, tip: TopicIdPartition) -> None:
        self.topic_ids.setdefault(tip.topic, set()).add(tip.topic_id)

    @property
    def whole(self) -> bool:
        """Every manifest read and written, with no gap, overlap, refused partition, or
        topic of two ids (an earlier incarnation's leftovers recovered beside it)."""
        return not (
            self.skipped
            or self.refused
            or self.gaps
            or self.overlaps
            or any(len(ids) > 1 for ids in self.topic_ids.values())
        )


def lineage(tip: TopicIdPartition, segments: list[RemoteLogSegmentMetadata]) -> PartitionRecovery:
    """The partition's gaps and overlaps, its segments ordered by start offset (then end)."""
    ordered = sorted(segments, key=lambda s: (s.start_offset, s.end_offset))
    found = PartitionRecovery(tip, ordered)
    covering: RemoteLogSegmentMetadata | None = None  # the one reaching furthest so far
    for segment in ordered:
        if covering is not None:
            if segment.start_offset > covering.end_offset + 1:
                found.gaps.append(Gap(tip, covering.end_offset + 1, segment.start_offset - 1))
            elif segment.start_offset <= covering.end_offset:
                found.overlaps.append(Overlap(covering, segment))
        if covering is None or segment.end_offset > covering.end_offset:
            covering = segment
    return found


@dataclass
class Recovery:
    store: ObjectStore
    metadata: SegmentRecoverer
    # Names the run to the metadata manager, which names it to a second run it refuses.
    recovery: str
    key_prefix: str = ""
    topic: str | None = None
    # Only this incarnation of `topic` (its Kafka topic id), when set.
    topic_id: uuid.UUID | None = None
    # The cluster's topics' ids by name, when given: partitions of any other id (a
    # deleted incarnation's) are reported, not recovered.
    cluster_topic_ids: Mapping[str, uuid.UUID] | None = None
    timeout_s: float = 30.0
    # Manifests read at a time; the listing itself is streamed.
    reads_in_flight: int = 16
    # Partitions recovered at a time: each is one call, and the manager confirms each
    # metadata partition's writes in turn.
    partitions_in_flight: int = 8
    # The custom metadata written with each segment is what its copy returned:
    # the same fields, under the same bound.
    custom_metadata_max_bytes: int = 128

    async def run(
        self,
        *,
        dry_run: bool = False,
        on_partition: Callable[[PartitionRecovery], None] = lambda _: None,
    ) -> RecoveryReport:
        """Recover every partition under the prefix (of `topic` only, if set);
        `on_partition` hears of each once it is done (a progress line)."""
        report = RecoveryReport(dry_run=dry_run)

        async def partitions() -> AsyncIterator[Callable[[], Awaitable[None]]]:
            """The listing's manifests grouped by partition (contiguous in a listing)."""
            current: TopicIdPartition | None = None
            manifests: list[Manifest] = []
            async with contextlib.aclosing(self._manifests(report)) as found_all:
                async for found in found_all:
                    if isinstance(found, Skipped):
                        report.skipped.append(found)
                        continue
                    tip = found.metadata.topic_id_partition
                    if tip != current:
                        if current is not None:
                            yield partial(
                                self._partition, current, manifests, report, dry_run, on_partition
                            )
                        current, manifests = tip, []
                    manifests.append(found)
            if current is not None:
                yield partial(self._partition, current, manifests, report, dry_run, on_partition)

        await bounded_gather(partitions(), self.partitions_in_flight)
        return report

    async def _partition(
        self,
        tip: TopicIdPartition,
        manifests: list[Manifest],
        report: RecoveryReport,
        dry_run: bool,
        on_partition: Callable[[PartitionRecovery], None],
    ) -> None:
        recovered = lineage(tip, [m.metadata for m in manifests])
        finished = [self._finished(m) for m in manifests]
        try:
            done = await self.metadata.recover_remote_log_segments(
                tip, finished, recovery=self.recovery, dry_run=dry_run, timeout_s=self.timeout_s
            )
        except (RemoteResourceNotFoundError, InvalidStateTransitionError) as exc:
            # Deleted, or being deleted: reported, and the other partitions go on.
            report.refuse(Refused(tip, len(manifests), str(exc)))
            return
        written = {segment_id.id for segment_id in done.written}
        completed = {segment_id.id for segment_id in done.completed}
        recovered.missing = [s for s in recovered.segments if s.remote_log_segment_id.id in written]
        recovered.completed = [
            s for s in recovered.segments if s.remote_log_segment_id.id in completed
        ]
        report.add(recovered)
        on_partition(recovered)

    def _finished(self, manifest: Manifest) -> RemoteLogSegmentMetadata:
        """The segment as Kafka's copy left it: COPY_SEGMENT_FINISHED, with the custom
        metadata the store's copy returned, by its broker at its time."""
        segment = manifest.metadata
        keys = SegmentKeys.of(self.key_prefix, segment)
        return replace(
            segment,
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            custom_metadata=segment_custom_metadata(
                manifest.remote_size, keys, self.custom_metadata_max_bytes
            ),
        )

    async def _manifests(self, report: RecoveryReport) -> AsyncGenerator[Manifest | Skipped, None]:
        """Each manifest's segment (or why it was skipped), in listing order, with up to
        `reads_in_flight` manifests being read at a time."""
        prefix = self.key_prefix + (f"{self.topic}-" if self.topic else "")
        reading: set[asyncio.Task[Manifest | Skipped]] = set()

        async def reads() -> AsyncGenerator[asyncio.Task[Manifest | Skipped], None]:
            async for stored in self.store.list(prefix):
                report.objects_scanned += 1
                parsed = parse_segment_key(self.key_prefix, stored.key)
                if parsed is None or parsed.suffix != MANIFEST_SUFFIX:
                    continue
                if self.topic and parsed.topic_id_partition.topic != self.topic:
                    continue
                if self.topic_id and parsed.topic_id_partition.topic_id != self.topic_id:
                    continue
                if not self._in_cluster(parsed.topic_id_partition, report):
                    continue
                read = asyncio.create_task(self._read(stored.key))
                reading.add(read)
                yield read

        try:
            async with contextlib.aclosing(read_ahead(reads(), self.reads_in_flight)) as ahead:
                async for read in ahead:
                    reading.discard(read)
                    yield await read
        finally:
            await cancel_and_wait(reading)  # read ahead, never taken

    def _in_cluster(self, tip: TopicIdPartition, report: RecoveryReport) -> bool:
        """Whether the cluster has `tip`'s topic id (or no cluster was given); counts
        the manifests of a partition it has not, which come one after another."""
        if self.cluster_topic_ids is None:
            return True
        cluster_id = self.cluster_topic_ids.get(tip.topic)
        if cluster_id == tip.topic_id:
            return True
        left = report.not_in_cluster
        segments = 1
        if left and left[-1].topic_id_partition == tip:
            segments += left.pop().segments
        left.append(NotInCluster(tip, segments, cluster_id))
        return False

    async def _read(self, key: str) -> Manifest | Skipped:
        """The manifest at `key`, or why it is skipped. A store that fails to answer
        fails the run: its segments are not to be reported as skipped."""
        try:
            with deadline_after(self.timeout_s):  # retried within the run's call timeout
                raw = await self.store.get(key)
        except RemoteResourceNotFoundError:
            return Skipped(key, "deleted while listed (a segment being deleted)")
        try:
            manifest = Manifest.from_json(raw, key)
        except RemoteStorageError as exc:  # damaged, or of a newer version
            return Skipped(key, str(exc))
        metadata = manifest.metadata
        if SegmentKeys.of(self.key_prefix, metadata).manifest != key:
            return Skipped(
                key,
                f"{key}: its manifest describes segment {metadata.remote_log_segment_id} "
                f"from offset {metadata.start_offset}, which is not the one its key names",
            )
        return manifest
