"""How a stream's micro-batch ends are capped by maxOffsetsPerTrigger and held back by
minOffsetsPerTrigger and maxTriggerDelay, as Spark's Kafka source does it
(KafkaMicroBatchStream.rateLimit and delayBatch)."""

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from remotelog.spark.options import parse_options
from remotelog.spark.stream import RemotelogStreamReader, rate_limit

ADDRESSES = {"remotelog.fetch.address": "f:1", "remotelog.metadata.address": "m:2"}


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000.0

    def __call__(self) -> float:
        return self.now_ms


def reader(clock: Clock, **options: str) -> RemotelogStreamReader:
    parsed = parse_options({**ADDRESSES, "subscribe": "t", **options}, streaming=True)
    return RemotelogStreamReader(parsed, clock_ms=clock)


def test_the_default_read_limit_is_the_one_spark_s_kafka_source_asks_for():
    clock = Clock()
    assert reader(clock).getDefaultReadLimit() == ReadAllAvailable()
    assert reader(clock, minOffsetsPerTrigger="5").getDefaultReadLimit() == ReadMinRows(5)
    # Both: Spark's composite limit; the Python API takes one, the reader applies the other.
    both = reader(clock, minOffsetsPerTrigger="5", maxOffsetsPerTrigger="9")
    assert both.getDefaultReadLimit() == ReadMaxRows(9)


def test_a_micro_batch_waits_for_min_offsets_until_the_trigger_delay_has_passed():
    clock = Clock()
    stream = reader(clock, minOffsetsPerTrigger="100", maxTriggerDelay="1m")
    begin = {("t", 0): 0, ("t", 1): 0}
    # The first micro-batch is never held back (the last trigger was at time 0).
    assert not stream.holds_back(begin, {("t", 0): 10, ("t", 1): 0})
    clock.now_ms += 59_000
    assert stream.holds_back(begin, {("t", 0): 60, ("t", 1): 39})  # 99 waiting
    assert not stream.holds_back(begin, {("t", 0): 60, ("t", 1): 40})  # 100
    clock.now_ms += 59_999
    assert stream.holds_back(begin, {("t", 0): 1, ("t", 1): 0})
    clock.now_ms += 1  # a minute since the last micro-batch: whatever waits goes
    assert not stream.holds_back(begin, {("t", 0): 1, ("t", 1): 0})
    assert stream.holds_back(begin, {("t", 0): 1, ("t", 1): 0})


def test_nothing_is_held_back_without_min_offsets_or_under_available_now():
    clock = Clock()
    plain = reader(clock, maxTriggerDelay="1h")
    assert not plain.holds_back({("t", 0): 0}, {("t", 0): 1})
    available_now = reader(clock, minOffsetsPerTrigger="100")
    available_now.target = {("t", 0): 1}
    assert not available_now.holds_back({("t", 0): 0}, {("t", 0): 1})
    assert not available_now.holds_back({("t", 0): 0}, {("t", 0): 1})


def test_the_limit_is_shared_in_proportion_to_what_each_partition_has_waiting():
    begin = {("t", 0): 100, ("t", 1): 0}
    ends = {("t", 0): 400, ("t", 1): 100}
    # 300 and 100 waiting, 40 allowed: 30 and 10.
    assert rate_limit(begin, ends, 40) == {("t", 0): 130, ("t", 1): 10}


def test_a_partition_with_little_waiting_is_not_starved():
    begin = {("t", 0): 0, ("t", 1): 0}
    ends = {("t", 0): 10_000, ("t", 1): 1}
    # 1 of 10,001 waiting: its share rounds up to one offset, the rest's down.
    assert rate_limit(begin, ends, 100) == {("t", 0): 99, ("t", 1): 1}


def test_nothing_waiting_or_a_limit_above_it_leaves_the_ends():
    begin = {("t", 0): 5, ("t", 1): 7}
    assert rate_limit(begin, {("t", 0): 5, ("t", 1): 7}, 10) == {("t", 0): 5, ("t", 1): 7}
    assert rate_limit(begin, {("t", 0): 8, ("t", 1): 9}, 100) == {("t", 0): 8, ("t", 1): 9}
