"""What the remote tier of a partition holds, as the read path sees it.

A broker knows its partition's leader-epoch lineage from its own checkpoint;
the fetch service runs apart from brokers, so it derives the lineage from the
copied segments themselves (each carries its epochs) and keeps only the
segments within it: leftovers of an unclean election, which the copy
scheduler deletes in time, are never served. Views are cached per partition
for `remote.fetch.segment.metadata.cache.ms` and rebuilt at once when a read
misses (an offset past the cached end, a segment deleted since).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from remotelog.core.epochs import epoch_for_offset, lineage_of_segments, within_lineage
from remotelog.core.errors import FencedLeaderEpochError, UnknownLeaderEpochError
from remotelog.core.model import RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState


@dataclass(frozen=True)
class RemoteTierView:
    partition: TopicIdPartition
    lineage: tuple[tuple[int, int], ...]
    segments: tuple[RemoteLogSegmentMetadata, ...]  # within the lineage, ascending, disjoint
    starts: tuple[int, ...] = ()  # start offsets of `segments`, for bisect

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", tuple(s.start_offset for s in self.segments))

    @classmethod
    def of(
        cls, partition: TopicIdPartition, listed: Sequence[RemoteLogSegmentMetadata]
    ) -> RemoteTierView:
        copied = [s for s in listed if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        lineage = lineage_of_segments(s.segment_leader_epochs for s in copied)
        log_end = max((s.end_offset for s in copied), default=-1) + 1
        kept: list[RemoteLogSegmentMetadata] = []
        for segment in sorted(copied, key=lambda s: (s.start_offset, s.end_offset)):
            if not within_lineage(
                segment.segment_leader_epochs, segment.end_offset, log_end, lineage
            ):
                continue
            if kept and segment.start_offset <= kept[-1].end_offset:
                continue  # a second copy of a range (a leadership move): one is enough
            kept.append(segment)
        return cls(partition, tuple(lineage), tuple(kept))

    @property
    def earliest_offset(self) -> int | None:
        return self.segments[0].start_offset if self.segments else None

    @property
    def latest_offset(self) -> int | None:
        return self.segments[-1].end_offset if self.segments else None

    def epoch_for(self, offset: int) -> int | None:
        return epoch_for_offset(self.lineage, offset)

    def newer_than_lineage(self, leader_epoch: int) -> bool:
        return bool(self.lineage) and leader_epoch > self.lineage[-1][0]

    def check_leader_epoch(self, leader_epoch: int, offset: int) -> None:
        """Kafka's answers to a caller whose epoch for `offset` the lineage contradicts:
        an epoch newer than any tiered is UNKNOWN_LEADER_EPOCH (retriable: its segments
        may not be tiered yet); an epoch the lineage ended before `offset` is
        FENCED_LEADER_EPOCH (the caller's log diverged from the leader's)."""
        if not self.lineage:
            return  # no remote data: the lookup answers UNKNOWN_TOPIC_OR_PARTITION
        where = {"partition": str(self.partition), "leader_epoch": str(leader_epoch)}
        latest = self.lineage[-1][0]
        if leader_epoch > latest:
            raise UnknownLeaderEpochError(
                f"leader epoch {leader_epoch} of {self.partition} is newer than the latest "
                f"epoch in the remote tier ({latest})",
                metadata=where,
            )
        for (epoch, _), (next_epoch, next_start) in itertools.pairwise(self.lineage):
            if epoch == leader_epoch and offset >= next_start:
                raise FencedLeaderEpochError(
                    f"leader epoch {leader_epoch} of {self.partition} ended before offset "
                    f"{offset}: epoch {next_epoch} begins at {next_start}",
                    metadata=where,
                )

    def segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The segment holding `offset`, else the first one after it (a gap: compaction)."""
        index = bisect.bisect_right(self.starts, offset) - 1
        if index >= 0 and self.segments[index].end_offset >= offset:
            return self.segments[index]
        following = index + 1
        if following < len(self.segments) and offset >= (self.earliest_offset or 0):
            return self.segments[following]
        return None

    def next_after(self, segment: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata | None:
        index = bisect.bisect_right(self.starts, segment.end_offset)
        return self.segments[index] if index < len(self.segments) else None


Lister = Callable[[TopicIdPartition, float | None], Awaitable[list[RemoteLogSegmentMetadata]]]


class RemoteTierViews:
    """Per-partition views, cached for `ttl_ms`; concurrent rebuilds of one partition share one."""

    def __init__(
        self, list_segments: Lister, ttl_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._list = list_segments
        self._ttl_s = ttl_ms / 1000
        self._clock = clock
        self._views: dict[TopicIdPartition, tuple[float, RemoteTierView]] = {}
        self._building: dict[TopicIdPartition, asyncio.Future[RemoteTierView]] = {}

    async def get(
        self,
        partition: TopicIdPartition,
        *,
        refresh: bool = False,
        timeout_s: float | None = None,
    ) -> RemoteTierView:
        cached = self._views.get(partition)
        if cached is not None and not refresh and self._clock() - cached[0] < self._ttl_s:
            return cached[1]
        building = self._building.get(partition)
        if building is None:
            building = asyncio.ensure_future(self._build(partition, timeout_s))
            self._building[partition] = building
            building.add_done_callback(lambda done: self._built(partition, done))
        return await asyncio.shield(building)

    def _built(self, partition: TopicIdPartition, done: asyncio.Future[RemoteTierView]) -> None:
        self._building.pop(partition, None)
        if not done.cancelled():
            # Retrieved here: when every reader waiting on it gave up first (Fetches
            # expired in the purgatory), a failed listing reaches nobody, and is no
            # fault of this process (METADATA_NOT_READY during a restart, say).
            done.exception()

    async def _build(self, partition: TopicIdPartition, timeout_s: float | None) -> RemoteTierView:
        started = self._clock()
        view = RemoteTierView.of(partition, await self._list(partition, timeout_s))
        if view.segments:
            self._views[partition] = (started, view)
        else:
            # Not kept: reads of arbitrary partitions must not grow the cache without
            # bound; a partition without remote data costs a listing per read instead.
            self._views.pop(partition, None)
        return view

    def forget(self, partition: TopicIdPartition) -> None:
        self._views.pop(partition, None)

    def __len__(self) -> int:
        """Views kept: one per partition with remote data read within the TTL or since."""
        return len(self._views)
