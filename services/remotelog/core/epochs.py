"""Leader-epoch arithmetic of RemoteLogManager and LeaderEpochFileCache, on plain lists.

A lineage is the content of a `leader-epoch-checkpoint`: (epoch, start offset)
pairs, ascending in both. Kafka keeps it in a LeaderEpochFileCache and uses it
to decide which offsets a segment carries, where copying resumes after a
leadership change, and which remote segments belong to the current history
(the rest are leftovers of an unclean election and are deleted).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

Lineage = Sequence[tuple[int, int]]


def entries_in_range(lineage: Lineage, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
    """LeaderEpochFileCache.epochEntriesInRange: truncate from the start, then from the end.

    Entries starting at or after `end_offset` go; of those starting at or before
    `start_offset` only the last stays, moved to `start_offset`. A negative
    `start_offset` keeps the head untouched (Kafka passes -1 for the checkpoint
    shipped with a segment).
    """
    kept = [(epoch, offset) for epoch, offset in lineage if offset < end_offset]
    if start_offset < 0:
        return kept
    at_or_before = [entry for entry in kept if entry[1] <= start_offset]
    after = [entry for entry in kept if entry[1] > start_offset]
    if at_or_before:
        return [(at_or_before[-1][0], start_offset), *after]
    return after


def epoch_for_offset(lineage: Lineage, offset: int) -> int | None:
    """The epoch whose range holds `offset`; None before the first entry."""
    starts = [start for _, start in lineage]
    index = bisect.bisect_right(starts, offset) - 1
    return lineage[index][0] if index >= 0 else None


def end_offset_for(lineage: Lineage, epoch: int, log_end_offset: int) -> int:
    """LeaderEpochFileCache.endOffsetFor (exclusive) for an epoch of the lineage."""
    for index, (entry_epoch, _) in enumerate(lineage):
        if entry_epoch == epoch:
            return lineage[index + 1][1] if index + 1 < len(lineage) else log_end_offset
    raise ValueError(f"epoch {epoch} is not in the lineage")


def filtered(lineage: Lineage) -> list[tuple[int, int]]:
    """buildFilteredLeaderEpochMap: drop epochs that hold no record (same start as the next)."""
    ordered = sorted(lineage)
    return [
        entry
        for index, entry in enumerate(ordered)
        if index + 1 == len(ordered) or ordered[index + 1][1] != entry[1]
    ]


def within_lineage(
    segment_epochs: Lineage, segment_end_offset: int, log_end_offset: int, lineage: Lineage
) -> bool:
    """RemoteLogManager.isRemoteSegmentWithinLeaderEpochs, on a filtered lineage.

    The segment's epochs must be the lineage's (same epoch, same start) except
    where the segment begins and ends: its first epoch may start earlier than
    the lineage's when that epoch is the lineage's first (the log start moved
    up), and it must end before the next epoch begins and below the log end.
    """
    if not lineage:
        return False
    ours = dict(filtered(segment_epochs))
    theirs = dict(lineage)
    epochs = sorted(ours)
    theirs_sorted = sorted(theirs)
    first_lineage, last_lineage = theirs_sorted[0], theirs_sorted[-1]
    last = epochs[-1]
    if last < first_lineage or last > last_lineage:
        return False
    first = next((e for e in epochs if e >= first_lineage), None)
    if first is None:
        return False

    def higher(keys: list[int], mapping: dict[int, int], epoch: int) -> tuple[int, int] | None:
        index = bisect.bisect_right(keys, epoch)
        return (keys[index], mapping[keys[index]]) if index < len(keys) else None

    for epoch in epochs:
        if epoch < first:
            continue
        if epoch not in theirs:
            return False
        if epoch == first and epoch != first_lineage and ours[epoch] < theirs[epoch]:
            return False
        if epoch == last:
            following = higher(theirs_sorted, theirs, epoch)
            if following is not None and segment_end_offset > following[1] - 1:
                return False
        elif higher(theirs_sorted, theirs, epoch) != higher(epochs, ours, epoch):
            return False
    return segment_end_offset < log_end_offset


def lineage_of_segments(segments_epochs: Iterable[Lineage]) -> list[tuple[int, int]]:
    """The lineage the remote tier implies: every epoch at its lowest start, then truncated.

    Entries are assigned in epoch order as LeaderEpochFileCache.assign does:
    a new epoch removes earlier entries that start at or after it, which is
    what an unclean election did to the old leader's history.
    """
    starts: dict[int, int] = {}
    for epochs in segments_epochs:
        for epoch, start in epochs:
            starts[epoch] = min(start, starts.get(epoch, start))
    lineage: list[tuple[int, int]] = []
    for epoch in sorted(starts):
        start = starts[epoch]
        while lineage and lineage[-1][1] >= start:
            lineage.pop()
        lineage.append((epoch, start))
    return lineage
