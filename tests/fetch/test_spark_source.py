"""spark.read.format("remotelog") over real services: the rows a direct decode gives."""

import asyncio
import functools
import json
import uuid

import pytest
from support.tiering import batch
from support.topics import OpenTransaction, as_record, broker_records, produce

from remotelog.kafka.consumer_records import fetched_records
from remotelog.kafka.records import build_batch

from .test_tiered_consumer import COMMITTED, UNCOMMITTED

# The storage backend is the TieredConsumer tests' concern (both run there); Spark's
# path is the same over either, and each Spark job costs seconds.
pytestmark = pytest.mark.parametrize("tiered", ["filesystem"], indirect=True)

COLUMNS = [
    "key",
    "value",
    "topic",
    "partition",
    "offset",
    "unix_millis(timestamp)",
    "timestampType",
]


def source(spark, stack, *, streaming=False, **options):
    reader = (
        (spark.readStream if streaming else spark.read)
        .format("remotelog")
        .option("remotelog.fetch.address", f"127.0.0.1:{stack.running[0].service.port}")
        .option("remotelog.metadata.address", f"127.0.0.1:{stack.metadata.service.port}")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


async def rows(frame, *columns) -> list[tuple]:
    """The frame's rows in offset order, collected in a thread: the services the Spark
    tasks call run on this test's event loop."""
    ordered = frame.selectExpr(*(columns or COLUMNS)).orderBy("topic", "partition", "offset")
    return [tuple(row) for row in await asyncio.to_thread(ordered.collect)]


async def tier_copy(stack, kafka_logs, directory: str) -> str:
    """A fresh topic holding the broker-written partition's segments."""
    topic = f"spark-{uuid.uuid4().hex[:8]}"
    await stack.tier_directory(topic, kafka_logs / directory)
    return topic


def expected(stack, topic: str, start: int = 0, end: int | None = None) -> list[tuple]:
    log = stack.log_bytes(topic)
    return [
        (r.key, r.value, topic, 0, r.offset, r.timestamp, r.timestamp_type)
        for r in fetched_records(log, topic, 0, start_offset=start, end_offset=end).records()
    ]


async def test_a_topic_reads_as_spark_kafka_rows_equal_to_a_direct_decode(
    spark, tiered, kafka_logs
):
    topic = await tier_copy(tiered, kafka_logs, "test_topic_a-0")
    frame = source(spark, tiered, subscribe=topic)
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert await rows(frame) == expected(tiered, topic)


async def test_tasks_on_the_stores_host_read_its_files_to_the_same_rows(spark, tiered, kafka_logs):
    topic = await tier_copy(tiered, kafka_logs, "test_topic_a-0")
    on_host = {"remotelog.segment.store.short.circuit.socket.path": tiered.short_circuit_socket}
    frame = source(spark, tiered, subscribe=topic, **on_host)
    assert await rows(frame) == expected(tiered, topic)
    middle = len(expected(tiered, topic)) // 2  # offsets from 0: a start inside a segment
    bounded = source(
        spark,
        tiered,
        assign=json.dumps({topic: [0]}),
        startingOffsets=json.dumps({topic: {"0": middle}}),
        **on_host,
    )
    assert await rows(bounded) == expected(tiered, topic, middle)


async def test_offset_bounds_and_patterns_select_the_rows(spark, tiered, kafka_logs):
    first = await tier_copy(tiered, kafka_logs, "timeindex_test")
    everything = expected(tiered, first)
    middle = everything[len(everything) // 2][4]
    bounded = source(
        spark,
        tiered,
        assign=json.dumps({first: [0]}),
        startingOffsets=json.dumps({first: {"0": middle}}),
        endingOffsets=json.dumps({first: {"0": middle + 5}}),
    )
    assert await rows(bounded) == expected(tiered, first, middle, middle + 5)
    pattern = source(spark, tiered, subscribePattern=f"{first}|no-such-topic")
    assert await rows(pattern) == everything


async def test_timestamps_bound_the_rows_as_spark_kafka_resolves_them(spark, tiered, kafka_logs):
    topic = await tier_copy(tiered, kafka_logs, "timeindex_test")
    everything = expected(tiered, topic)

    def first_at(timestamp: int) -> int:
        return next(r[4] for r in everything if r[5] >= timestamp)

    low, high = everything[len(everything) // 4][5], everything[3 * len(everything) // 4][5]
    by_time = source(spark, tiered, subscribe=topic, startingTimestamp=str(low))
    assert await rows(by_time) == expected(tiered, topic, first_at(low))
    per_partition = source(
        spark,
        tiered,
        subscribe=topic,
        startingOffsets="earliest",  # startingOffsetsByTimestamp takes precedence
        startingOffsetsByTimestamp=json.dumps({topic: {"0": low}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": high}}),
    )
    assert await rows(per_partition) == expected(tiered, topic, first_at(low), first_at(high))
    too_late = str(max(r[5] for r in everything) + 1)
    with pytest.raises(Exception, match="startingTimestamp"):
        await rows(source(spark, tiered, subscribe=topic, startingTimestamp=too_late))
    at_end = source(
        spark,
        tiered,
        subscribe=topic,
        startingTimestamp=too_late,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert await rows(at_end) == []


async def segment_sizes(stack, topic: str) -> list[int]:
    """Records per tiered segment, in offset order."""
    return [s.end_offset + 1 - s.start_offset for s in await stack.segments(stack.tip(topic))]


async def tasks(frame) -> int:
    return await asyncio.to_thread(lambda: frame.rdd.getNumPartitions())


# A task per segment: a byte bound below every segment's size.
PER_SEGMENT = {"remotelog.maxBytesPerPartition": "1"}


async def test_segments_packed_into_tasks_by_bytes_cut_further_by_min_partitions_and_max_records(
    spark, tiered, kafka_logs
):
    topic = await tier_copy(tiered, kafka_logs, "timeindex_test")
    everything = expected(tiered, topic)
    sizes = await segment_sizes(tiered, topic)
    # The broker's segments are all near 1 MiB: two to a task under twice the largest.
    largest = max(s.segment_size_in_bytes for s in await tiered.segments(tiered.tip(topic)))
    whole = source(spark, tiered, subscribe=topic)
    pairs = source(
        spark, tiered, subscribe=topic, **{"remotelog.maxBytesPerPartition": str(2 * largest)}
    )
    each = source(spark, tiered, subscribe=topic, **PER_SEGMENT)
    cut = source(spark, tiered, subscribe=topic, minPartitions="10", **PER_SEGMENT)
    small = source(spark, tiered, subscribe=topic, maxRecordsPerPartition="5000")
    assert len(sizes) == 4
    assert await tasks(whole) == 1  # 4 segments of far less than 128 MiB
    assert await tasks(pairs) == 2
    assert await tasks(each) == 4
    # Spark's KafkaOffsetRangeCalculator: each range's share of minPartitions, rounded.
    assert await tasks(cut) == sum(int(size / sum(sizes) * 10 + 0.5) for size in sizes)
    assert await tasks(small) == -(-sum(sizes) // 5000)
    assert await rows(pairs) == everything
    assert await rows(cut) == everything
    assert await rows(small) == everything


async def test_pushed_filters_plan_only_the_segments_they_need(spark, tiered, kafka_logs):
    topic = await tier_copy(tiered, kafka_logs, "timeindex_test")
    everything = expected(tiered, topic)
    sizes = await segment_sizes(tiered, topic)
    pushing = source(
        spark, tiered, subscribe=topic, **{"remotelog.pushFilters": "true"}, **PER_SEGMENT
    )
    plain = source(spark, tiered, subscribe=topic, **PER_SEGMENT)
    # Offsets inside the third segment: one task, exactly those rows.
    low, high = sizes[0] + sizes[1] + 10, sizes[0] + sizes[1] + 20
    where = f"partition = 0 and offset >= {low} and offset < {high}"
    assert await tasks(pushing.where(where)) == 1
    assert await tasks(plain.where(where)) == 4
    assert await rows(pushing.where(where)) == expected(tiered, topic, low, high)
    # A timestamp in the last segment: the earlier three are never read.
    late = everything[sum(sizes[:3]) + 5][5]
    since = f"timestamp >= timestamp_millis({late})"
    assert await tasks(pushing.where(since)) == 1
    assert await rows(pushing.where(since)) == [r for r in everything if r[5] >= late]
    # Another topic or partition: nothing planned (Spark runs one empty placeholder task).
    assert await rows(pushing.where("partition = 1")) == []
    assert await rows(pushing.where(f"topic = '{topic}-other'")) == []


async def test_read_committed_hides_aborted_records(spark, tiered):
    # The transactional log again, under a name only this stack's store holds.
    topic = f"spark-txns-{uuid.uuid4().hex[:8]}"
    await tiered.tier_directory(topic, tiered.tmp / "broker" / "txns-0")
    assign = json.dumps({topic: [0]})
    uncommitted = source(spark, tiered, assign=assign)
    committed = source(spark, tiered, assign=assign, isolationLevel="read_committed")
    assert [r[0] for r in await rows(uncommitted, "offset")] == UNCOMMITTED
    assert [r[0] for r in await rows(committed, "offset")] == COMMITTED


async def test_headers_and_the_broker_tail_with_kafka_bootstrap_servers(spark, tiered, broker):
    topic = f"spark-hybrid-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(produce, broker.bootstrap_servers, topic, 30)
    on_broker = await asyncio.to_thread(broker_records, broker.bootstrap_servers, topic)
    await tiered.tier_batches(topic, [[build_batch([as_record(o)]) for o in range(20)]])
    untiered = f"{topic}-fresh"  # on the broker only: nothing tiered yet
    await asyncio.to_thread(produce, broker.bootstrap_servers, untiered, 7)
    frame = source(
        spark,
        tiered,
        subscribePattern=f"{topic}.*",
        includeHeaders="true",
        **{"kafka.bootstrap.servers": broker.bootstrap_servers},
    )
    found = await rows(
        frame, "topic", "offset", "key", "value", "unix_millis(timestamp)", "headers"
    )
    fresh = await asyncio.to_thread(broker_records, broker.bootstrap_servers, untiered)
    expected = [(topic, *r) for r in on_broker] + [(untiered, *r) for r in fresh]
    assert [row[:5] for row in found] == [r[:5] for r in expected]
    assert [tuple((h.key, h.value) for h in hs) if hs else () for *_, hs in found] == [
        r[5] for r in expected
    ]
    assert found[0][5] is None  # offset 0 has no headers: null, as Spark's Kafka source


async def test_read_committed_with_a_broker_ends_at_its_last_stable_offset(spark, tiered, broker):
    """0-4 tiered, 0-16 on the broker with a transaction still open over 14-16."""
    topic = f"spark-open-txn-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(produce, broker.bootstrap_servers, topic, 10)
    transaction = await asyncio.to_thread(OpenTransaction, broker.bootstrap_servers, topic)
    await tiered.tier_batches(topic, [[build_batch([as_record(o) for o in range(5)])]])
    tail = {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic}
    try:
        committed = source(spark, tiered, **tail, **{"kafka.isolation.level": "read_committed"})
        assert [r[0] for r in await rows(committed, "offset")] == OpenTransaction.COMMITTED
        # endingOffsets latest is the broker's log end, not a batch's base offset + 1.
        uncommitted = source(spark, tiered, **tail, endingOffsets="latest")
        expected = [o for o in range(OpenTransaction.HIGH_WATERMARK) if o != 13]
        assert [r[0] for r in await rows(uncommitted, "offset")] == expected
    finally:
        await asyncio.to_thread(transaction.abort)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "subscribe"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "given: assign, subscribe"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "endingOffsets"),
        ({"subscribe": "a", "assign_typo": "x"}, "assign_typo"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, "startingTimestamp"),
        ({"assign": '{"never-tiered":[0]}'}, "never-tiered-0"),
    ],
)
async def test_bad_options_fail_the_query_naming_the_option(spark, tiered, options, named):
    with pytest.raises(Exception, match=named):
        await asyncio.to_thread(lambda: source(spark, tiered, **options).collect())


def segments_of(first: int, count: int, per_batch: int = 10) -> list[list[bytes]]:
    """`count` offsets from `first` as segments of two batches each."""
    batches = [batch(o, per_batch) for o in range(first, first + count, per_batch)]
    return [batches[i : i + 2] for i in range(0, len(batches), 2)]


async def test_a_stream_reads_each_record_once_across_triggers_and_restarts(
    spark, tiered, tmp_path
):
    topic = f"spark-stream-{uuid.uuid4().hex[:8]}"
    await tiered.tier_batches(topic, segments_of(0, 100))
    frame = stream_of(spark, tiered, topic, maxOffsetsPerTrigger="30")
    assert await caught_up(frame, tmp_path) == [30, 30, 30, 10]
    # New segments arrive; a restart from the checkpoint reads only them.
    await tiered.tier_batches(topic, segments_of(100, 60))
    assert await caught_up(frame, tmp_path) == [30, 30]
    found = await written(spark, tmp_path)
    assert found == [(o, f"k{o}".encode(), b"v" * 10) for o in range(160)]


async def test_a_stream_with_a_broker_reads_history_and_tail_once_across_restarts(
    spark, tiered, broker, tmp_path
):
    """Records 0-29 on the broker, 0-19 tiered; then 30-39 arrive on the broker only."""
    topic = f"spark-stream-hybrid-{uuid.uuid4().hex[:6]}"
    each = functools.partial(produce, broker.bootstrap_servers, topic)
    await asyncio.to_thread(each, 30)
    await tiered.tier_batches(topic, [[build_batch([as_record(o)]) for o in range(20)]])
    frame = stream_of(spark, tiered, topic, **{"kafka.bootstrap.servers": broker.bootstrap_servers})
    assert sum(await caught_up(frame, tmp_path)) == 30
    await asyncio.to_thread(each, 10, 30)
    assert sum(await caught_up(frame, tmp_path)) == 10
    on_broker = await asyncio.to_thread(broker_records, broker.bootstrap_servers, topic)
    assert [r[:3] for r in on_broker] == [
        (o, f"k{o}".encode(), f"v{o}".encode() * 5) for o in range(40)
    ]
    assert await written(spark, tmp_path) == [r[:3] for r in on_broker]


def stream_of(spark, stack, topic: str, **options):
    """A stream of the topic from its earliest offset."""
    return source(
        spark, stack, streaming=True, subscribe=topic, startingOffsets="earliest", **options
    )


async def caught_up(frame, tmp_path) -> list[int]:
    """One run of the streaming query (Trigger.AvailableNow) into parquet under
    `tmp_path`, from its checkpoint there: the rows of each micro-batch."""

    def run() -> list[int]:
        query = (
            frame.selectExpr("offset", "key", "value")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    return await asyncio.to_thread(run)


async def written(spark, tmp_path) -> list[tuple]:
    """What the streaming query wrote, in offset order."""
    frame = spark.read.parquet(str(tmp_path / "out")).orderBy("offset")
    return [tuple(r) for r in await asyncio.to_thread(frame.collect)]
