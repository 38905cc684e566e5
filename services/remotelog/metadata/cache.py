"""Kafka's RemoteLogMetadataCache and RemoteLogLeaderEpochState, one partition's segments.

Semantics follow Kafka exactly (storage/.../metadata/storage/RemoteLogMetadataCache.java):
- a segment in COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED, or superseded by
  a later copy of the same epoch range, is *unreferenced*: listed (so it can be
  cleaned up) but never returned by an offset lookup;
- `remote_log_segment_metadata(epoch, offset)` finds the COPY_SEGMENT_FINISHED
  segment whose epoch range (start .. next epoch's start - 1, or the segment's
  end) holds the offset;
- an epoch's highest offset only grows: deleting segments does not lower it;
- DELETE_SEGMENT_FINISHED forgets the segment;
- an event with an invalid state transition is dropped (Kafka logs and drops).

Segments are held packed (remotelog.metadata.packed) keyed by their 16-byte id.
"""

from __future__ import annotations

import logging
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from remotelog.core.errors import RemoteResourceNotFoundError
from remotelog.core.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionSummary,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState, is_valid_segment_transition
from remotelog.metadata import packed

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


class OffsetIndex:
    """A sorted map of epoch start offset -> segment id (Kafka's ConcurrentSkipListMap).

    Keys live in an `array('q')` (8 bytes each) beside a list of ids. Removal
    leaves a tombstone (None) so deleting the oldest segments, what retention
    does all day, costs O(1) instead of shifting the arrays; tombstones are
    compacted away once they are half the entries, and never left at the tail.
    """

    __slots__ = ("_dead", "_ids", "_keys")

    def __init__(self) -> None:
        self._keys = array("q")
        self._ids: list[bytes | None] = []
        self._dead = 0

    def __len__(self) -> int:
        return len(self._ids) - self._dead

    def floor(self, offset: int) -> bytes | None:
        i = bisect_right(self._keys, offset) - 1
        ids = self._ids
        while i >= 0 and ids[i] is None:
            i -= 1
        return ids[i] if i >= 0 else None

    def first_key(self) -> int | None:
        for key, segment_id in zip(self._keys, self._ids, strict=True):
            if segment_id is not None:
                return key
        return None

    def last(self) -> tuple[int, bytes] | None:
        if not self._ids:
            return None
        last_id = self._ids[-1]
        assert last_id is not None  # the tail is never a tombstone
        return self._keys[-1], last_id

    def pop_last(self) -> None:
        self._keys.pop()
        self._ids.pop()
        self._trim()

    def put(self, offset: int, segment_id: bytes) -> None:
        keys = self._keys
        if not keys or offset > keys[-1]:
            keys.append(offset)
            self._ids.append(segment_id)
            return
        i = bisect_left(keys, offset)
        if i < len(keys) and keys[i] == offset:
            if self._ids[i] is None:
                self._dead -= 1
            self._ids[i] = segment_id
        else:
            keys.insert(i, offset)
            self._ids.insert(i, segment_id)

    def remove(self, offset: int, segment_id: bytes) -> None:
        """Kafka's remove(key, value): only when the key maps to this segment."""
        i = bisect_left(self._keys, offset)
        if i == len(self._keys) or self._keys[i] != offset or self._ids[i] != segment_id:
            return
        self._ids[i] = None
        self._dead += 1
        self._trim()
        if self._dead > 32 and self._dead * 2 > len(self._ids):
            self._compact()

    def items(self) -> Iterator[tuple[int, bytes]]:
        for key, segment_id in zip(self._keys, self._ids, strict=True):
            if segment_id is not None:
                yield key, segment_id

    def _trim(self) -> None:
        while self._ids and self._ids[-1] is None:
            self._keys.pop()
            self._ids.pop()
            self._dead -= 1

    def _compact(self) -> None:
        live = list(self.items())
        self._keys = array("q", (key for key, _ in live))
        self._ids = [segment_id for _, segment_id in live]
        self._dead = 0


class LeaderEpochState:
    """Kafka's RemoteLogLeaderEpochState: the segments of one leader epoch."""

    __slots__ = ("highest_log_offset", "offsets", "unreferenced")

    def __init__(self) -> None:
        self.offsets = OffsetIndex()
        self.unreferenced: set[bytes] = set()
        self.highest_log_offset: int | None = None

    def copy_finished(self, start_offset: int, segment_id: bytes, epoch_end_offset: int) -> None:
        # A new leader may re-copy what an old leader with tiering lag already
        # copied (a superset, or an overlap starting earlier): the older copies
        # of this range stop being referenced.
        last = self.offsets.last()
        while (
            last is not None
            and last[0] >= start_offset
            and self.highest_log_offset is not None
            and self.highest_log_offset <= epoch_end_offset
        ):
            self.offsets.pop_last()
            self.unreferenced.add(last[1])
            last = self.offsets.last()
        self.offsets.put(start_offset, segment_id)
        self.unreferenced.discard(segment_id)
        if self.highest_log_offset is None or epoch_end_offset > self.highest_log_offset:
            self.highest_log_offset = epoch_end_offset

    def delete_started(self, start_offset: int, segment_id: bytes) -> None:
        self.offsets.remove(start_offset, segment_id)
        self.unreferenced.add(segment_id)

    def segment_ids(self) -> list[bytes]:
        return [segment_id for _, segment_id in self.offsets.items()] + list(self.unreferenced)


class RemoteLogMetadataCache:
    """Every live (not DELETE_SEGMENT_FINISHED) segment of one user partition."""

    __slots__ = ("epochs", "segments", "topic_id_partition")

    def __init__(self, topic_id_partition: TopicIdPartition) -> None:
        self.topic_id_partition = topic_id_partition
        self.segments: dict[bytes, bytes] = {}
        self.epochs: dict[int, LeaderEpochState] = {}

    def __len__(self) -> int:
        return len(self.segments)

    # -- events -------------------------------------------------------------

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> str | None:
        """Apply an add; returns why it was dropped, or None when applied."""
        if metadata.state is not _S.COPY_SEGMENT_STARTED:
            return f"an added segment must be COPY_SEGMENT_STARTED, not {metadata.state.name}"
        segment_id = metadata.remote_log_segment_id.id.bytes
        dropped = self._check_transition(segment_id, metadata.state)
        if dropped:
            return dropped
        for epoch, _ in metadata.segment_leader_epochs:
            self._epoch(epoch).unreferenced.add(segment_id)
        self.segments[segment_id] = packed.pack(metadata)
        return None

    def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> str | None:
        """Apply an update; raises RemoteResourceNotFoundError for an unknown segment."""
        segment_id = update.remote_log_segment_id.id.bytes
        existing = self.segments.get(segment_id)
        if existing is None:
            raise RemoteResourceNotFoundError(
                f"no remote log segment metadata for {update.remote_log_segment_id}"
            )
        if update.state is _S.COPY_SEGMENT_STARTED:
            return "an update can not move a segment to COPY_SEGMENT_STARTED"
        dropped = self._check_transition(segment_id, update.state)
        if dropped:
            return dropped
        updated = packed.unpack(self.topic_id_partition, segment_id, existing).create_with_updates(
            update
        )
        epochs = updated.segment_leader_epochs
        if update.state is _S.COPY_SEGMENT_FINISHED:
            for epoch, start in epochs:
                end = packed.epoch_end_offset(existing, epoch)
                self._epoch(epoch).copy_finished(start, segment_id, end)
        elif update.state is _S.DELETE_SEGMENT_STARTED:
            for epoch, start in epochs:
                self._epoch(epoch).delete_started(start, segment_id)
        else:  # DELETE_SEGMENT_FINISHED: the segment is gone for good
            for epoch, _ in epochs:
                self._epoch(epoch).unreferenced.discard(segment_id)
            del self.segments[segment_id]
            return None
        self.segments[segment_id] = packed.pack(updated)
        return None

    def segment_state(self, segment_id: bytes) -> RemoteLogSegmentState | None:
        existing = self.segments.get(segment_id)
        return None if existing is None else packed.state(existing)

    def _check_transition(self, segment_id: bytes, target: RemoteLogSegmentState) -> str | None:
        source = self.segment_state(segment_id)
        if is_valid_segment_transition(source, target):
            return None
        return f"{source.name if source else 'no state'} can not move to {target.name}"

    def _epoch(self, epoch: int) -> LeaderEpochState:
        state = self.epochs.get(epoch)
        if state is None:
            state = self.epochs[epoch] = LeaderEpochState()
        return state

    # -- reads ----------------------------------------------------------------

    def summary(self) -> RemotePartitionSummary | None:
        """The offsets and bytes of its COPY_SEGMENT_FINISHED segments; None without any."""
        finished = [
            segment
            for segment in self.segments.values()
            if packed.state(segment) is _S.COPY_SEGMENT_FINISHED
        ]
        if not finished:
            return None
        return RemotePartitionSummary(
            self.topic_id_partition,
            earliest_offset=min(packed.start_offset(segment) for segment in finished),
            latest_tiered_offset=max(packed.end_offset(segment) for segment in finished),
            remote_bytes=sum(packed.size_in_bytes(segment) for segment in finished),
            segment_count=len(finished),
        )

    def metadata(self, segment_id: bytes) -> RemoteLogSegmentMetadata:
        return packed.unpack(self.topic_id_partition, segment_id, self.segments[segment_id])

    def remote_log_segment_metadata(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        state = self.epochs.get(leader_epoch)
        if state is None:
            return None
        segment_id = state.offsets.floor(offset)
        if segment_id is None:
            return None
        existing = self.segments.get(segment_id)
        if existing is None or offset > packed.epoch_end_offset(existing, leader_epoch):
            return None
        return packed.unpack(self.topic_id_partition, segment_id, existing)

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        state = self.epochs.get(leader_epoch)
        return None if state is None else state.highest_log_offset

    def list_remote_log_segments(
        self, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments in every state but DELETE_SEGMENT_FINISHED, ascending by start offset.

        Ties (copies of one range: by two leaders, or a failed attempt and the copy
        that followed) list unfinished ones first, as Kafka's own RLMM lists its
        unreferenced segments: Kafka's expiration task walks the listing until the
        first segment it keeps, so a failed attempt after the finished copy of its
        range would never be deleted again. Then by segment id, so every instance
        lists identically.
        """
        if leader_epoch is None:
            ids: list[bytes] = list(self.segments)
        else:
            state = self.epochs.get(leader_epoch)
            ids = [] if state is None else state.segment_ids()
        segments = self.segments
        ids = [segment_id for segment_id in ids if segment_id in segments]
        finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ids.sort(
            key=lambda segment_id: (
                packed.start_offset(segments[segment_id]),
                packed.state(segments[segment_id]) is finished,
                segment_id,
            )
        )
        return [self.metadata(segment_id) for segment_id in ids]

    def remote_log_size(self, leader_epoch: int) -> int:
        """KIP-852: bytes of the epoch's listed segments (Kafka sums the same listing)."""
        state = self.epochs.get(leader_epoch)
        if state is None:
            return 0
        segments = self.segments
        return sum(
            packed.size_in_bytes(segments[segment_id])
            for segment_id in set(state.segment_ids())
            if segment_id in segments
        )

    def next_segment_with_txn_index(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        """KIP-1058: the first copied segment at or after `offset` with a non-empty txn index.

        Kafka's cache walks one epoch; its RemoteLogManager then tries the later
        epochs from their first offset. Both steps are done here.
        """
        for epoch in sorted(e for e in self.epochs if e >= leader_epoch):
            start = offset
            if epoch != leader_epoch:
                first = self.epochs[epoch].offsets.first_key()
                if first is None:
                    continue
                start = max(offset, first)
            found = self._next_with_txn_index_in_epoch(epoch, start)
            if found is not None:
                return found
        return None

    def _next_with_txn_index_in_epoch(
        self, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        metadata = self.remote_log_segment_metadata(leader_epoch, offset)
        while metadata is not None and metadata.txn_index_empty:
            metadata = self.remote_log_segment_metadata(leader_epoch, metadata.end_offset + 1)
        return metadata
