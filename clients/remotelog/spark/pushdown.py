"""Filters Spark pushes to the `remotelog` source, turned into what planning can prune.

`topic` and `partition` predicates drop whole Kafka partitions, `offset` ranges
narrow each partition's range, and a lower bound on `timestamp` starts each
partition at the first offset that late (the fetch service finds it through the
time indexes, so earlier segments are never read). Spark's Kafka source pushes none
of these: it reads the whole range and filters afterwards.

Pruning by `topic`, `partition` and offset comparisons is exact, so those filters
are not evaluated again. Timestamps in a Kafka partition are not ordered by offset,
so a timestamp bound only moves the start; Spark still applies it to every row.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from remotelog.core.model import TopicIdPartition

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Span:
    """Integers in [low, high); high None: no upper bound."""

    low: int = 0
    high: int | None = None
    values: frozenset[int] | None = None  # from `=` and `in`; None: any in the span

    def within(self, low: int, high: int | None) -> Span:
        highs = [h for h in (self.high, high) if h is not None]
        return replace(self, low=max(self.low, low), high=min(highs) if highs else None)

    def only(self, values: Iterable[int]) -> Span:
        given = frozenset(values)
        return replace(self, values=given if self.values is None else self.values & given)

    def holds(self, value: int) -> bool:
        in_span = self.low <= value and (self.high is None or value < self.high)
        return in_span and (self.values is None or value in self.values)

    def clip(self, start: int, end: int | None) -> tuple[int, int | None]:
        """[start, end) narrowed to the span (values only bound it: min to max)."""
        low, high = self.low, self.high
        if self.values is not None:
            low = max(low, min(self.values, default=0))
            top = max(self.values, default=-1) + 1
            high = top if high is None else min(high, top)
        ends = [e for e in (end, high) if e is not None]
        return max(start, low), min(ends) if ends else None


@dataclass(frozen=True)
class Pushed:
    """What the pushed filters allow, ANDed."""

    topics: frozenset[str] | None = None  # None: any
    partitions: Span = Span()
    offsets: Span = Span()
    timestamp_from_ms: int | None = None  # no row before the first offset this late

    def keeps(self, partition: TopicIdPartition) -> bool:
        named = self.topics is None or partition.topic in self.topics
        return named and self.partitions.holds(partition.partition)


def push(filters: Iterable[Filter]) -> tuple[Pushed, list[Filter]]:
    """The pruning the filters allow, and the filters Spark must still apply."""
    pushed, remaining = Pushed(), []
    for pushed_filter in filters:
        pushed, exact = _apply(pushed, pushed_filter)
        if not exact:
            remaining.append(pushed_filter)
    return pushed, remaining


def _apply(pushed: Pushed, given: Filter) -> tuple[Pushed, bool]:
    """`pushed` narrowed by one filter, and whether that pruning is exact."""
    column = getattr(given, "attribute", ())
    value: Any = getattr(given, "value", None)
    if column == ("topic",):
        names = _strings(given, value)
        if names is None:
            return pushed, False
        topics = names if pushed.topics is None else pushed.topics & names
        return replace(pushed, topics=topics), True
    if column == ("partition",):
        partitions = _narrowed(pushed.partitions, given, value)
        if partitions is None:
            return pushed, False
        return replace(pushed, partitions=partitions), True
    if column == ("offset",):
        offsets = _narrowed(pushed.offsets, given, value)
        if offsets is None:
            return pushed, False
        # An `in` list only bounds the range: the offsets between still need Spark.
        return replace(pushed, offsets=offsets), not isinstance(given, In)
    if column == ("timestamp",) and isinstance(given, EqualTo | GreaterThan | GreaterThanOrEqual):
        if not isinstance(value, datetime.datetime):
            return pushed, False
        # Kafka timestamps are milliseconds: floor, so no row the filter keeps is skipped.
        millis = (_utc(value) - EPOCH) // datetime.timedelta(milliseconds=1)
        start = max(millis, pushed.timestamp_from_ms or millis)
        return replace(pushed, timestamp_from_ms=start), False
    return pushed, False


def _narrowed(span: Span, given: Filter, value: Any) -> Span | None:
    if isinstance(given, In):
        values = list(value)
        return span.only(values) if all(_is_int(v) for v in values) else None
    if not _is_int(value):
        return None
    if isinstance(given, EqualTo):
        return span.only([value])
    if isinstance(given, GreaterThan):
        return span.within(value + 1, None)
    if isinstance(given, GreaterThanOrEqual):
        return span.within(value, None)
    if isinstance(given, LessThan):
        return span.within(0, value)
    if isinstance(given, LessThanOrEqual):
        return span.within(0, value + 1)
    return None


def _strings(given: Filter, value: Any) -> frozenset[str] | None:
    if isinstance(given, EqualTo) and isinstance(value, str):
        return frozenset([value])
    if isinstance(given, In) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _utc(value: datetime.datetime) -> datetime.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
