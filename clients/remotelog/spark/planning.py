"""Offset ranges cut into Spark tasks: a partition's remote segments packed into
tasks as Spark packs files (`segment_cuts`), then cut as Spark's Kafka source cuts
them (KafkaOffsetRangeCalculator): `maxRecordsPerPartition` first, then
`minPartitions` by splitting each range in proportion to its share of all offsets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PlannedRange:
    topic_id: str
    topic: str
    partition: int
    start: int
    end: int | None  # None: to the end the read finds (the broker tail); never split

    @property
    def size(self) -> int:
        return 0 if self.end is None else self.end - self.start


def segment_cuts(
    segments: Sequence[tuple[int, int]], start: int, end: int, max_bytes: int
) -> list[int]:
    """Offsets strictly inside [start, end) to cut a partition's remote range at, so that
    each piece holds consecutive segments of at most `max_bytes` in all (a segment
    larger alone is a piece of its own): Spark packs files into tasks of
    spark.sql.files.maxPartitionBytes alike. `segments` are (end offset, exclusive;
    bytes), ascending. A task costs its start, its channels and its scheduling, about
    0.1 s on two cores: a task per 1 MiB segment made a small topic's count() three
    times slower than a task per partition (bench/README.md, "The first query")."""
    cuts: list[int] = []
    held, previous_end = 0, start
    for segment_end, size in segments:
        if segment_end <= start:
            continue
        if held and held + size > max_bytes:
            cuts.append(previous_end)
            held = 0
        held += size
        previous_end = segment_end
        if segment_end >= end:
            break
    return cuts


def split(
    ranges: Sequence[PlannedRange], min_partitions: int | None, max_records: int | None
) -> list[PlannedRange]:
    planned = list(ranges)
    if max_records is not None:
        planned = [
            piece for r in planned for piece in _divided(r, max(math.ceil(r.size / max_records), 1))
        ]
    if min_partitions is None or len(planned) >= min_partitions:
        return planned
    total = sum(r.size for r in planned)
    if total == 0:
        return planned
    return [
        piece
        for r in planned
        # Scala's math.round: halves go up (Python's round goes to even).
        for piece in _divided(r, max(math.floor(r.size / total * min_partitions + 0.5), 1))
    ]


def _divided(r: PlannedRange, parts: int) -> list[PlannedRange]:
    if r.end is None or parts <= 1:
        return [r]
    size = r.size
    return [
        replace(r, start=r.start + size * i // parts, end=r.start + size * (i + 1) // parts)
        for i in range(parts)
        if size * i // parts < size * (i + 1) // parts
    ]
