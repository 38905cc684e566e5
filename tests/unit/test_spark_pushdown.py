"""Filters Spark pushes to the remotelog source: what they prune, what Spark still applies."""

import datetime
import uuid

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from remotelog.core.model import TopicIdPartition
from remotelog.spark.pushdown import Pushed, push

UTC = datetime.UTC


def tip(topic: str, partition: int) -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(int=1), topic, partition)


def test_partition_and_topic_predicates_prune_exactly_and_are_not_applied_again():
    filters = [
        In(("topic",), ["a", "b"]),
        EqualTo(("topic",), "b"),
        GreaterThanOrEqual(("partition",), 1),
        LessThan(("partition",), 4),
        In(("partition",), [0, 2, 3, 7]),
    ]
    pushed, remaining = push(filters)
    assert remaining == []
    kept = [(t, p) for t in "abc" for p in range(8) if pushed.keeps(tip(t, p))]
    assert kept == [("b", 2), ("b", 3)]


def test_offset_comparisons_clip_the_range_exactly():
    pushed, remaining = push(
        [GreaterThan(("offset",), 10), LessThanOrEqual(("offset",), 20), IsNotNull(("offset",))]
    )
    assert [type(f) for f in remaining] == [IsNotNull]
    assert pushed.offsets.clip(0, None) == (11, 21)
    assert pushed.offsets.clip(15, 18) == (15, 18)  # the options' own bounds stay
    equal, _ = push([EqualTo(("offset",), 7)])
    assert equal.offsets.clip(0, 100) == (7, 8)


def test_an_offset_list_bounds_the_range_but_spark_still_filters_it():
    listed = In(("offset",), [40, 5, 9])
    pushed, remaining = push([listed])
    assert remaining == [listed]
    assert pushed.offsets.clip(0, None) == (5, 41)


def test_contradicting_offsets_leave_an_empty_range():
    pushed, _ = push([GreaterThanOrEqual(("offset",), 50), LessThan(("offset",), 10)])
    start, end = pushed.offsets.clip(0, None)
    assert end is not None
    assert start >= end


def test_a_timestamp_lower_bound_moves_the_start_and_stays_with_spark():
    later = GreaterThan(("timestamp",), datetime.datetime(2024, 1, 1, 0, 0, 1, 999, tzinfo=UTC))
    earlier = GreaterThanOrEqual(("timestamp",), datetime.datetime(2024, 1, 1, tzinfo=UTC))
    upper = LessThan(("timestamp",), datetime.datetime(2025, 1, 1, tzinfo=UTC))
    pushed, remaining = push([later, earlier, upper])
    assert remaining == [later, earlier, upper]
    # The later bound wins; 1.000999 s floors to 1000 ms so no matching row is skipped.
    assert pushed.timestamp_from_ms == 1704067200000 + 1000


def test_filters_it_cannot_use_go_back_to_spark_by_identity():
    filters = [
        StringStartsWith(("topic",), "a"),
        EqualTo(("partition",), "0"),
        GreaterThan(("key",), b"k"),
        EqualTo(("partition",), True),
    ]
    pushed, remaining = push(filters)
    assert all(a is b for a, b in zip(remaining, filters, strict=True))
    assert pushed == Pushed()
