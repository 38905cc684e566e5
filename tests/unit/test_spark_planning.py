"""The Spark source's options and task cuts, without Spark (pyspark is not imported)."""

import pytest

from remotelog.client.tiered_consumer import kafka_consumer
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from remotelog.spark.options import DEFAULT_MAX_BYTES_PER_PARTITION, parse_options
from remotelog.spark.planning import PlannedRange, segment_cuts, split

ADDRESSES = {"remotelog.fetch.address": "f:1", "remotelog.metadata.address": "m:1"}


def ranges(*sizes: int) -> list[PlannedRange]:
    return [PlannedRange("id", "t", p, 100, 100 + size) for p, size in enumerate(sizes)]


def cuts(planned: list[PlannedRange]) -> list[tuple[int, int, int | None]]:
    return [(r.partition, r.start, r.end) for r in planned]


def test_max_records_cuts_each_range_into_equal_pieces():
    assert cuts(split(ranges(10, 3), None, 4)) == [
        (0, 100, 103),
        (0, 103, 106),
        (0, 106, 110),
        (1, 100, 103),
    ]


def test_min_partitions_splits_in_proportion_to_each_ranges_share():
    # 300 of 400 offsets: 3 of 4 tasks; the small range keeps one.
    assert cuts(split(ranges(300, 100), 4, None)) == [
        (0, 100, 200),
        (0, 200, 300),
        (0, 300, 400),
        (1, 100, 200),
    ]
    assert split(ranges(300, 100), 2, None) == ranges(300, 100)  # already enough


def test_a_tail_without_an_end_is_never_cut():
    tail = PlannedRange("id", "t", 0, 500, None)
    assert split([tail, *ranges(8)], 5, 2) == [
        tail,
        *[PlannedRange("id", "t", 0, s, s + 2) for s in (100, 102, 104, 106)],
    ]


# (end offset, exclusive; bytes) of five segments of 100 offsets from offset 0.
SEGMENTS = [(100, 40), (200, 40), (300, 40), (400, 90), (500, 10)]


def test_segments_are_packed_into_tasks_of_at_most_the_byte_bound():
    assert segment_cuts(SEGMENTS, 0, 500, 100) == [200, 300]  # 80, 40, 100 bytes
    assert segment_cuts(SEGMENTS, 0, 500, 1000) == []  # the whole range: one task
    assert segment_cuts(SEGMENTS, 0, 500, 1) == [100, 200, 300, 400]  # one per segment


def test_only_the_segments_the_range_covers_count():
    # From offset 150: 40 + 40 bytes to 300, then the segment to 400 alone; the range
    # ends inside it, so nothing after it is cut off.
    assert segment_cuts(SEGMENTS, 150, 350, 100) == [300]
    assert segment_cuts(SEGMENTS, 150, 350, 79) == [200, 300]
    assert segment_cuts(SEGMENTS, 0, 100, 1) == []  # one segment: nothing to cut


def test_options_parse_as_spark_names_them():
    options = parse_options(
        {
            **ADDRESSES,
            "Subscribe": "a, b",
            "startingOffsets": '{"a":{"0":5,"1":-2}}',
            "endingOffsets": '{"a":{"0":9}}',
            "minPartitions": "8",
            "includeHeaders": "TRUE",
            "kafka.bootstrap.servers": "k:9092",
        }
    )
    assert options.subscription.topics == ("a", "b")
    assert [options.starting.of("a", p) for p in (0, 1, 2)] == [
        5,
        EARLIEST_TIMESTAMP,
        EARLIEST_TIMESTAMP,
    ]
    assert [options.ending.of("a", p) for p in (0, 1)] == [9, LATEST_TIMESTAMP]
    assert (options.min_partitions, options.include_headers) == (8, True)
    assert options.bootstrap_servers == "k:9092"
    assert options.fail_on_data_loss is True
    assert options.max_bytes_per_partition == DEFAULT_MAX_BYTES_PER_PARTITION == 128 << 20
    given = parse_options({**ADDRESSES, "subscribe": "a", "remotelog.maxBytesPerPartition": "1"})
    assert given.max_bytes_per_partition == 1
    assert options.hedge_percentile == 95.0
    off = parse_options({**ADDRESSES, "subscribe": "a", "remotelog.hedgePercentile": "0"})
    assert off.hedge_percentile == 0.0


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "a", "maxRecordsPerPartition": "x"}, "maxRecordsPerPartition"),
        (
            {"subscribe": "a", "remotelog.maxBytesPerPartition": "0"},
            "remotelog.maxBytesPerPartition",
        ),
        ({"subscribePattern": "(unclosed"}, "subscribePattern"),
        ({"assign": '{"a":[-1]}'}, "assign"),
        ({"assign": "not json"}, "assign"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets"),
        ({"subscribe": "a", "isolationLevel": "serializable"}, "isolationLevel"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, "startingTimestamp"),
        (
            {"subscribe": "a", "endingOffsetsByTimestamp": '{"a":{"0":-5}}'},
            "endingOffsetsByTimestamp",
        ),
        (
            {"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"},
            "startingOffsetsByTimestampStrategy",
        ),
        ({"subscribe": "a", "remotelog.hedgePercentile": "101"}, "remotelog.hedgePercentile"),
        ({"subscribe": "a", "remotelog.hedgePercentile": "p95"}, "remotelog.hedgePercentile"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger"),
        ({"subscribe": "a", "maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"subscribe": "a", "kafkaConsumer.pollTimeoutMs": "512"}, "kafkaconsumer.polltimeoutms"),
        ({"subscribe": "a", "fetchOffset.numRetries": "3"}, "fetchoffset.numretries"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ],
)
def test_bad_options_name_themselves(extra, field):
    with pytest.raises(InvalidArgumentError) as raised:
        parse_options({**ADDRESSES, **extra})
    assert raised.value.field == field


def test_trigger_bounds_and_kafka_settings_parse_as_spark_s_kafka_source_reads_them():
    options = parse_options(
        {
            **ADDRESSES,
            "subscribe": "a",
            "minOffsetsPerTrigger": "500",
            "maxTriggerDelay": "30s",
            "groupIdPrefix": "etl",
            "kafka.bootstrap.servers": "b:9092",
            "kafka.client.id": "nightly",
            "kafka.isolation.level": "read_committed",
        },
        streaming=True,
    )
    assert options.min_offsets_per_trigger == 500
    assert options.max_trigger_delay_ms == 30_000
    assert options.group_id_prefix == "etl"
    # Passed on to the tail consumer, but for what the source reads itself.
    assert options.kafka_config == (("client.id", "nightly"),)
    assert options.read_committed
    defaults = parse_options({**ADDRESSES, "subscribe": "a"}, streaming=True)
    assert defaults.max_trigger_delay_ms == 15 * 60 * 1000  # Spark's default, 15m
    assert (
        parse_options(
            {**ADDRESSES, "subscribe": "a", "maxTriggerDelay": "250"}
        ).max_trigger_delay_ms
        == 250
    )


def test_a_timestamp_for_all_partitions_wins_over_one_per_partition():
    options = parse_options(
        {
            **ADDRESSES,
            "subscribe": "a",
            "startingOffsets": '{"a":{"0":7}}',
            "startingOffsetsByTimestamp": '{"a":{"0":1000}}',
            "endingTimestamp": "5000",
        }
    )
    assert options.starting.timestamp_of("a", 0) == 1000
    assert options.starting.timestamp_of("a", 1) is None
    assert options.starting.of("a", 0) == 7  # used where no timestamp applies
    assert options.ending.timestamp_of("a", 3) == 5000
    assert options.timestamp_strategy == "error"


def test_the_endpoints_are_required():
    with pytest.raises(InvalidArgumentError) as raised:
        parse_options({"subscribe": "a"})
    assert raised.value.field == "remotelog.fetch.address"


def test_a_stream_starts_at_latest_and_takes_no_ending_bound():
    stream = parse_options({**ADDRESSES, "subscribe": "a"}, streaming=True)
    assert stream.starting.of("a", 0) == LATEST_TIMESTAMP
    per_partition = parse_options(
        {**ADDRESSES, "subscribe": "a", "startingOffsets": '{"a":{"0":-1,"1":-2}}'},
        streaming=True,
    )
    assert [per_partition.starting.of("a", p) for p in (0, 1)] == [
        LATEST_TIMESTAMP,
        EARLIEST_TIMESTAMP,
    ]
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(InvalidArgumentError) as raised:
            parse_options({**ADDRESSES, "subscribe": "a", name: "latest"}, streaming=True)
        assert raised.value.field == name
    assert parse_options({**ADDRESSES, "subscribe": "a"}).starting.of("a", 0) == EARLIEST_TIMESTAMP


def test_a_kafka_setting_librdkafka_refuses_names_itself():
    with pytest.raises(InvalidArgumentError) as raised:
        kafka_consumer(
            {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "fetch.max.bytes": "x"}
        )
    assert raised.value.field == "kafka.fetch.max.bytes"
