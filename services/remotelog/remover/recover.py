"""Recovery: the metadata topic rebuilt from the manifests a store keeps beside each segment.

The store writes a segment's manifest last on copy and deletes it first on delete,
so a manifest names a complete segment and holds its full RemoteLogSegmentMetadata.
Recovery lists the manifests (a partition's keys are contiguous and ascending by
start offset in a listing, S3's and the filesystem store's alike), and for each
segment the metadata manager does not know writes what Kafka's RLMM would have
written for it: COPY_SEGMENT_STARTED, then COPY_SEGMENT_FINISHED. A segment it
knows in any state is left as it is, so a second run writes nothing. Objects
without a manifest are not segments (the scrub's); a manifest of a newer version,
or one that cannot be read or disagrees with its key, is reported and skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial

from remotelog.core.errors import RemoteResourceNotFoundError, RemoteStorageError
from remotelog.core.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from remotelog.core.ports import RemoteLogMetadataManager
from remotelog.core.states import RemoteLogSegmentState
from remotelog.core.tasks import bounded_gather, cancel_and_wait
from remotelog.segmentstore.backend import ObjectStore
from remotelog.segmentstore.layout import (
    Manifest,
    SegmentKeys,
    parse_segment_key,
    partition_prefix,
    segment_custom_metadata,
)

MANIFEST_SUFFIX = "rsm-manifest"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A manifest recovery did not use, and why (its key names it)."""

    key: str
    why: str


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
    # Known only as COPY_SEGMENT_STARTED: a copy in flight, or a run cut off between
    # its two records. Left as they are (nothing tells the two apart), and reported.
    unfinished: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    overlaps: list[Overlap] = field(default_factory=list)


@dataclass
class RecoveryReport:
    objects_scanned: int = 0
    partitions: list[PartitionRecovery] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    dry_run: bool = False

    @property
    def segments_found(self) -> int:
        return sum(len(p.segments) for p in self.partitions)

    @property
    def segments_missing(self) -> int:
        return sum(len(p.missing) for p in self.partitions)


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
    metadata: RemoteLogMetadataManager
    key_prefix: str = ""
    topic: str | None = None
    timeout_s: float = 30.0
    # Manifests read at a time; the listing itself is streamed.
    reads_in_flight: int = 16
    # Partitions, and segments of each, being written at a time.
    partitions_in_flight: int = 8
    writes_in_flight: int = 8
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
        # Partitions recovered side by side: the manager confirms one metadata
        # partition's writes one after another, and a recovered partition's records
        # all go to one metadata partition.
        recovering: set[asyncio.Task[None]] = set()

        async def recover(tip: TopicIdPartition, manifests: list[Manifest]) -> None:
            while len(recovering) >= self.partitions_in_flight:
                done, _ = await asyncio.wait(recovering, return_when=asyncio.FIRST_COMPLETED)
                recovering.difference_update(done)
                for task in done:
                    task.result()  # the first failure stops the run
            recovering.add(
                asyncio.create_task(self._partition(tip, manifests, report, dry_run, on_partition))
            )

        current: TopicIdPartition | None = None
        manifests: list[Manifest] = []
        try:
            async for found in self._manifests(report):
                if isinstance(found, Skipped):
                    report.skipped.append(found)
                    continue
                tip = found.metadata.topic_id_partition
                if tip != current:
                    if current is not None:
                        await recover(current, manifests)
                    current, manifests = tip, []
                manifests.append(found)
            if current is not None:
                await recover(current, manifests)
            if recovering:
                await asyncio.gather(*recovering)
        except BaseException:
            await cancel_and_wait(recovering)
            raise
        report.partitions.sort(key=lambda p: _listing_order(p.topic_id_partition))
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
        known = await self._known(tip)
        recovered.missing = [
            s for s in recovered.segments if s.remote_log_segment_id.id not in known
        ]
        recovered.unfinished = [
            s
            for s in recovered.segments
            if known.get(s.remote_log_segment_id.id) is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        ]
        if not dry_run:
            sizes = {m.metadata.remote_log_segment_id.id: m.remote_size for m in manifests}
            # Each write returns once the manager has read it back (a round trip through
            # Kafka): segments are written side by side, each one's two records in order.
            await bounded_gather(
                (
                    partial(self._write, segment, sizes[segment.remote_log_segment_id.id])
                    for segment in recovered.missing
                ),
                self.writes_in_flight,
            )
        report.partitions.append(recovered)
        on_partition(recovered)

    async def _known(self, tip: TopicIdPartition) -> dict[uuid.UUID, RemoteLogSegmentState]:
        """The state of each of the partition's segments the metadata manager knows."""
        try:
            listed = self.metadata.list_remote_log_segments(tip, timeout_s=self.timeout_s)
            async with contextlib.aclosing(listed):
                return {s.remote_log_segment_id.id: s.state async for s in listed}
        except RemoteResourceNotFoundError:
            return {}

    async def _write(self, segment: RemoteLogSegmentMetadata, remote_size: int) -> None:
        """As Kafka's copy would have: the segment STARTED, then FINISHED with what the
        store's copy returned, by its broker at its time."""
        await self.metadata.add_remote_log_segment_metadata(segment, timeout_s=self.timeout_s)
        keys = SegmentKeys.of(self.key_prefix, segment)
        finished = RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=segment.remote_log_segment_id,
            event_timestamp_ms=segment.event_timestamp_ms,
            custom_metadata=segment_custom_metadata(
                remote_size, keys, self.custom_metadata_max_bytes
            ),
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            broker_id=segment.broker_id,
        )
        await self.metadata.update_remote_log_segment_metadata(finished, timeout_s=self.timeout_s)

    async def _manifests(self, report: RecoveryReport) -> AsyncIterator[Manifest | Skipped]:
        """Each manifest's segment (or why it was skipped), in listing order, with up to
        `reads_in_flight` manifests being read at a time."""
        prefix = self.key_prefix + (f"{self.topic}-" if self.topic else "")
        reads: asyncio.Queue[asyncio.Task[Manifest | Skipped] | None]
        reads = asyncio.Queue(self.reads_in_flight)

        async def lister() -> None:
            try:
                async for stored in self.store.list(prefix):
                    report.objects_scanned += 1
                    parsed = parse_segment_key(self.key_prefix, stored.key)
                    if parsed is None or parsed.suffix != MANIFEST_SUFFIX:
                        continue
                    if self.topic and parsed.topic_id_partition.topic != self.topic:
                        continue
                    await reads.put(asyncio.create_task(self._read(stored.key)))
            finally:
                await reads.put(None)

        listing = asyncio.create_task(lister())
        try:
            while (read := await reads.get()) is not None:
                yield await read
            await listing  # its error, if it failed
        finally:
            listing.cancel()
            # Room for the lister's last put, then it has ended; reads not taken stop.
            left = []
            while not reads.empty():
                if (read := reads.get_nowait()) is not None:
                    left.append(read)
            await cancel_and_wait([listing, *left])

    async def _read(self, key: str) -> Manifest | Skipped:
        """The manifest at `key`, or why it is skipped. A store that fails to answer
        fails the run: its segments are not to be reported as skipped."""
        try:
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


def _listing_order(tip: TopicIdPartition) -> str:
    """Where a partition's keys come in a listing (partition 10 after partition 1/)."""
    return partition_prefix("", tip)
