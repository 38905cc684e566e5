"""Scrub: find (and on request delete) what is in the bucket that no live metadata references.

Kafka never lists its remote storage, so anything written and then forgotten
stays forever: a copy that crashed after its upload and before its metadata,
a partition whose deletion finished while a late copy was uploading, a
multipart upload that was never completed or aborted. The scrub lists the
bucket (or the filesystem store's directory), asks the metadata manager which
segments each partition still has, and reports every object of a segment it
does not know, older than the grace period. Only with `delete=True` does it
delete them (manifest first, as the store does) and abort old incomplete
uploads. Keys the segment layout did not write are reported, never touched.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from remotelog.core.errors import RemoteResourceNotFoundError
from remotelog.core.model import TopicIdPartition
from remotelog.core.ports import SegmentLister
from remotelog.segmentstore.backend import IncompleteUpload, ObjectStore, StoredObject
from remotelog.segmentstore.layout import parse_segment_key

# Deletion order of a segment's objects: the manifest first, so a scrub cut
# short never leaves a manifest that names missing objects.
_DELETE_ORDER = {"rsm-manifest": 0, "indexes": 1, "log": 2}


@dataclass(frozen=True)
class Orphan:
    object: StoredObject
    why: str


@dataclass
class ScrubReport:
    objects_scanned: int = 0
    partitions_scanned: int = 0
    orphans: list[Orphan] = field(default_factory=list)
    uploads: list[IncompleteUpload] = field(default_factory=list)
    # Objects the segment layout did not write: reported, never deleted.
    unrecognised: list[StoredObject] = field(default_factory=list)
    # Unreferenced but younger than the grace period (maybe a copy in flight).
    too_young: int = 0
    deleted: bool = False

    @property
    def orphan_bytes(self) -> int:
        return sum(o.object.size for o in self.orphans)


@dataclass
class Scrub:
    store: ObjectStore
    metadata: SegmentLister
    key_prefix: str = ""
    grace_s: float = 3600.0
    clock: Callable[[], float] = time.time
    timeout_s: float = 30.0

    async def run(self, *, delete: bool = False) -> ScrubReport:
        report = ScrubReport()
        cutoff = self.clock() - self.grace_s
        by_partition: dict[TopicIdPartition, list[tuple[StoredObject, uuid.UUID]]] = {}
        async for stored in self.store.list(self.key_prefix):
            report.objects_scanned += 1
            parsed = parse_segment_key(self.key_prefix, stored.key)
            if parsed is None:
                report.unrecognised.append(stored)
                continue
            by_partition.setdefault(parsed.topic_id_partition, []).append(
                (stored, parsed.segment_id)
            )
        report.partitions_scanned = len(by_partition)
        for tip, objects in by_partition.items():
            live, why = await self._live_segments(tip)
            for stored, segment_id in objects:
                if segment_id in live:
                    continue
                if stored.last_modified_s > cutoff:
                    report.too_young += 1
                    continue
                report.orphans.append(Orphan(stored, why))
        async for upload in self.store.incomplete_uploads(self.key_prefix):
            if upload.initiated_s <= cutoff:
                report.uploads.append(upload)
        if delete:
            await self._delete(report)
        return report

    async def _live_segments(self, tip: TopicIdPartition) -> tuple[set[uuid.UUID], str]:
        """Ids of the partition's segments in any state but DELETE_SEGMENT_FINISHED."""
        try:
            listed = self.metadata.list_remote_log_segments(tip, timeout_s=self.timeout_s)
            live = {s.remote_log_segment_id.id async for s in listed}
        except RemoteResourceNotFoundError:
            return set(), "its partition was deleted"
        return live, "no metadata references its segment"

    async def _delete(self, report: ScrubReport) -> None:
        ordered = sorted(
            report.orphans,
            key=lambda o: (o.object.key.rsplit(".", 1)[0], _order(o.object.key)),
        )
        for orphan in ordered:
            await self.store.delete([orphan.object.key])
        for upload in report.uploads:
            await self.store.abort_upload(upload)
        report.deleted = True


def _order(key: str) -> int:
    return _DELETE_ORDER.get(key.rsplit(".", 1)[-1], len(_DELETE_ORDER))
