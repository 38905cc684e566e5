"""`format("remotelog")` against Spark's own `format("kafka")`, option for option.

Apache Kafka tiers the topics through the plugin and local retention deletes what
was tiered, so Spark's Kafka source reads the history through the broker (which
fetches it from remotelog) and the tail from the broker's disk; the remotelog
source reads the history straight from the remote tier and the tail from the
broker (`kafka.bootstrap.servers`). Every query runs on both and the rows must be
equal: the README's promise that a job switches by changing the format name.
"""

import asyncio
import json
import uuid
from dataclasses import dataclass

import pytest
import pytest_asyncio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.waiting import eventually

from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState

from .test_kafka_tiers import PARTITIONS, TIERING_TIMEOUT_S, create_tiered_topic, wait_until_tiered

RECORDS = 2400  # per partition: 600-byte values roll two 1 MiB segments, tiered
TAIL = 300  # per partition, produced after tiering: the broker's local tail
TXN_RECORDS = 20
BASE_MS = 1_700_000_000_000
STEP_MS = 10  # record n of a partition has timestamp BASE_MS + n * STEP_MS
FUTURE_MS = 4_000_000_000_000  # 2096
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


@dataclass
class Topic:
    name: str
    ends: dict[int, int]  # the log end offset of each partition


def produce(bootstrap: str, topic: str, first: int, count: int, **config) -> None:
    """Records first..first+count-1 to each partition: keys, 600-byte values, a header on
    every third, timestamps STEP_MS apart."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for number in range(first, first + count):
        for partition in range(PARTITIONS):
            headers = [("n", str(number).encode())] if number % 3 == 0 else None
            producer.produce(
                topic,
                (f"{partition}-{number}-".encode() * 50)[:600],
                f"key-{number}".encode(),
                partition=partition,
                timestamp=BASE_MS + number * STEP_MS,
                headers=headers,
            )
        if number % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def produce_transactions(bootstrap: str, topic: str, first: int) -> None:
    """A committed transaction, then an aborted one: read_committed tells them apart."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"sbs-{topic}"})
    producer.init_transactions(30)
    for commit in (True, False):
        producer.begin_transaction()
        for _ in range(TXN_RECORDS):
            for partition in range(PARTITIONS):
                producer.produce(topic, b"txn", partition=partition, timestamp=BASE_MS + first)
        assert producer.flush(30) == 0  # an abort drops what is still queued
        (producer.commit_transaction if commit else producer.abort_transaction)(30)


def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "side-by-side"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def tiered_topic(kafka_tiering, prefix: str) -> tuple[str, uuid.UUID]:
    """A new tiered topic with RECORDS a partition in the remote tier (and deleted from
    the broker's disk): its name and id."""
    bootstrap = kafka_tiering.bootstrap
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    topic_id = create_tiered_topic(bootstrap, name)
    produce(bootstrap, name, 0, RECORDS, **{"enable.idempotence": True})
    wait_until_tiered(kafka_tiering.broker, name)
    return name, topic_id


@pytest_asyncio.fixture(scope="module")
async def topic(kafka_tiering) -> Topic:
    """History in the remote tier, then transactions and a tail on the broker's disk."""
    bootstrap = kafka_tiering.bootstrap
    name, _ = await asyncio.to_thread(tiered_topic, kafka_tiering, "sbs")
    await asyncio.to_thread(produce_transactions, bootstrap, name, RECORDS)
    await asyncio.to_thread(produce, bootstrap, name, RECORDS, TAIL)
    return Topic(name, await asyncio.to_thread(log_ends, bootstrap, name))


def source(spark, kafka_tiering, kind: str, *, streaming=False, **options):
    """`spark.read` (or readStream) of `kind`, "kafka" or "remotelog", over the broker."""
    settings = {"kafka.bootstrap.servers": kafka_tiering.bootstrap}
    if kind == "remotelog":
        stack = kafka_tiering.stack
        settings["remotelog.fetch.address"] = f"127.0.0.1:{stack.running[0].service.port}"
        settings["remotelog.metadata.address"] = f"127.0.0.1:{stack.metadata.service.port}"
    reader = (spark.readStream if streaming else spark.read).format(kind)
    for key, value in {**settings, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def collected(frame, columns=COLUMNS) -> list[tuple]:
    ordered = frame.selectExpr(*columns).orderBy("topic", "partition", "offset")
    return [tuple(row) for row in ordered.collect()]


async def side_by_side(spark, kafka_tiering, columns=COLUMNS, **options) -> list[tuple]:
    """The rows of both sources for the same options, asserted equal; those rows."""
    kafka, remotelog = [
        await asyncio.to_thread(collected, source(spark, kafka_tiering, kind, **options), columns)
        for kind in ("kafka", "remotelog")
    ]
    assert len(remotelog) == len(kafka)
    assert remotelog == kafka
    return kafka


def offsets(name: str, by_partition: dict[int, int]) -> str:
    return json.dumps({name: {str(p): at for p, at in by_partition.items()}})


def first_offsets(rows: list[tuple]) -> dict[int, int]:
    found: dict[int, int] = {}
    for row in rows:
        found.setdefault(row[3], row[4])
    return found


def at(number: int) -> int:
    """The timestamp of record `number` of any partition."""
    return BASE_MS + number * STEP_MS


async def test_subscribe_assign_and_subscribe_pattern(spark, kafka_tiering, topic):
    everything = await side_by_side(spark, kafka_tiering, subscribe=topic.name)
    # Every data record, the aborted ones too (read_uncommitted); no control record.
    assert len(everything) == PARTITIONS * (RECORDS + 2 * TXN_RECORDS + TAIL)
    assert first_offsets(everything) == dict.fromkeys(range(PARTITIONS), 0)
    assigned = await side_by_side(spark, kafka_tiering, assign=json.dumps({topic.name: [0, 2]}))
    assert assigned == [row for row in everything if row[3] in (0, 2)]
    pattern = await side_by_side(
        spark, kafka_tiering, subscribePattern=f"{topic.name}|no-such-topic-.*"
    )
    assert pattern == everything


async def test_starting_and_ending_offsets_as_json_and_as_earliest_latest(
    spark, kafka_tiering, topic
):
    name = topic.name
    # Across the boundary between the remote tier and the broker's disk, and -2 / -1.
    start = {0: 5, 1: -2, 2: RECORDS - 10}
    end = {0: RECORDS + 60, 1: -1, 2: topic.ends[2] - 1}
    rows = await side_by_side(
        spark,
        kafka_tiering,
        subscribe=name,
        startingOffsets=offsets(name, start),
        endingOffsets=offsets(name, end),
    )
    assert first_offsets(rows) == {0: 5, 1: 0, 2: RECORDS - 10}
    assert max(row[4] for row in rows if row[3] == 0) < RECORDS + 60
    named = await side_by_side(
        spark, kafka_tiering, subscribe=name, startingOffsets="earliest", endingOffsets="latest"
    )
    assert len(named) == PARTITIONS * (RECORDS + 2 * TXN_RECORDS + TAIL)


async def test_timestamps_for_every_partition_and_per_partition(spark, kafka_tiering, topic):
    name = topic.name
    rows = await side_by_side(
        spark,
        kafka_tiering,
        subscribe=name,
        startingTimestamp=str(at(1000)),
        endingTimestamp=str(at(RECORDS + 100)),
    )
    assert first_offsets(rows) == dict.fromkeys(range(PARTITIONS), 1000)
    per_partition = await side_by_side(
        spark,
        kafka_tiering,
        subscribe=name,
        startingOffsetsByTimestamp=offsets(name, {0: at(10), 1: at(2000), 2: at(RECORDS + 1)}),
        endingOffsetsByTimestamp=offsets(name, {0: at(500), 1: at(RECORDS + 5), 2: FUTURE_MS}),
    )
    assert first_offsets(per_partition)[1] == 2000
    # Nothing that late in partition 1 (transaction markers carry the time they were
    # written, so "late" is beyond the wall clock): `latest` starts it at the end.
    late = await side_by_side(
        spark,
        kafka_tiering,
        subscribe=name,
        startingOffsetsByTimestamp=offsets(name, {0: at(100), 1: FUTURE_MS, 2: at(100)}),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert first_offsets(late) == {0: 100, 2: 100}


async def test_min_partitions_headers_and_kafka_settings(spark, kafka_tiering, topic):
    name = topic.name
    everything = await side_by_side(spark, kafka_tiering, subscribe=name)
    # Cut into more tasks than segments: the same rows, whatever the split.
    assert await side_by_side(spark, kafka_tiering, subscribe=name, minPartitions="11") == (
        everything
    )
    with_headers = await side_by_side(
        spark, kafka_tiering, (*COLUMNS, "headers"), subscribe=name, includeHeaders="true"
    )
    assert [row[:-1] for row in with_headers] == everything
    assert with_headers[0][-1] == [("n", b"0")]
    assert with_headers[1][-1] is None
    # kafka.* goes on to the consumer of the tail: read_committed drops the aborted
    # transaction, which is in the broker's local log.
    committed = await side_by_side(
        spark,
        kafka_tiering,
        subscribe=name,
        **{"kafka.isolation.level": "read_committed", "kafka.client.id": "side-by-side"},
    )
    assert len(committed) == len(everything) - PARTITIONS * TXN_RECORDS


async def test_fail_on_data_loss_over_records_deleted_below_the_log_start(spark, kafka_tiering):
    """DeleteRecords moves partition 0's log start past its tiered segments, which Kafka
    then deletes from remotelog too: a start below it is data loss for both sources."""
    broker, stack = kafka_tiering.broker, kafka_tiering.stack
    name, topic_id = await asyncio.to_thread(tiered_topic, kafka_tiering, "lost")
    await asyncio.to_thread(produce, kafka_tiering.bootstrap, name, RECORDS, TAIL)
    cut = (await asyncio.to_thread(broker.list_offsets, name, "earliest-local"))[0]
    if cut >= (await asyncio.to_thread(broker.list_offsets, name, "latest"))[0]:
        # Idle, Kafka rolled and tiered the active segment too: records past the cut,
        # or partition 0 would have nothing left to read.
        await asyncio.to_thread(produce, kafka_tiering.bootstrap, name, RECORDS + TAIL, 10)
    admin = AdminClient({"bootstrap.servers": kafka_tiering.bootstrap})
    (deleted,) = admin.delete_records([TopicPartition(name, 0, cut)]).values()
    await asyncio.to_thread(deleted.result, 30)
    tip = TopicIdPartition(topic_id, name, 0)

    async def remote_copies_deleted() -> bool:
        copied = await stack.segments(tip, {RemoteLogSegmentState.COPY_SEGMENT_FINISHED})
        return all(segment.start_offset >= cut for segment in copied)

    await eventually(remote_copies_deleted, timeout_s=TIERING_TIMEOUT_S, interval_s=0.5)
    lost = offsets(name, {0: 0, 1: -2, 2: -2})
    rows = await side_by_side(
        spark, kafka_tiering, subscribe=name, startingOffsets=lost, failOnDataLoss="false"
    )
    assert first_offsets(rows) == {0: cut, 1: 0, 2: 0}
    for kind in ("kafka", "remotelog"):
        frame = source(spark, kafka_tiering, kind, subscribe=name, startingOffsets=lost)
        with pytest.raises(Exception, match="failOnDataLoss"):
            await asyncio.to_thread(collected, frame)


@pytest.mark.parametrize(
    "limits",
    [
        {"maxOffsetsPerTrigger": "1000"},
        # The first micro-batch goes at once; later ones wait for 10,000 new offsets,
        # which never come, until 2 s have passed since the last.
        {"minOffsetsPerTrigger": "10000", "maxTriggerDelay": "2s"},
    ],
    ids=["max", "min-and-delay"],
)
async def test_a_stream_writes_the_same_rows_as_spark_s_kafka_source(
    spark, kafka_tiering, tmp_path, limits
):
    bootstrap = kafka_tiering.bootstrap
    name, _ = await asyncio.to_thread(tiered_topic, kafka_tiering, "stream")
    batches: dict[str, list] = {"kafka": [], "remotelog": []}
    queries = []
    for kind in batches:
        frame = source(
            spark,
            kafka_tiering,
            kind,
            streaming=True,
            subscribe=name,
            startingOffsets="earliest",
            **limits,
        )

        def keep(batch, batch_id, kind=kind):
            batches[kind].append(collected(batch))

        queries.append(
            frame.writeStream.foreachBatch(keep)
            .option("checkpointLocation", str(tmp_path / kind))
            .start()
        )

    def rows(kind: str) -> list[tuple]:
        return sorted(row for batch in batches[kind] for row in batch)

    try:
        produced = RECORDS
        for more in (0, 400, 700):  # produced to the broker between triggers
            await asyncio.to_thread(produce, bootstrap, name, produced, more)
            produced += more
            expected = PARTITIONS * produced
            for kind in batches:
                await eventually(
                    lambda kind=kind, expected=expected: len(rows(kind)) >= expected,
                    timeout_s=120,
                    interval_s=0.2,
                    why=lambda kind=kind, expected=expected: (
                        f"{kind}: {len(rows(kind))} of {expected} rows"
                    ),
                )
        assert rows("remotelog") == rows("kafka")
        assert len(rows("kafka")) == expected
        if "maxOffsetsPerTrigger" in limits:
            # Which offsets a trigger finds depends on when it runs; the cap does not.
            for kind, written in batches.items():
                assert len(written) > expected / 1000, kind
                assert max(len(batch) for batch in written) <= 1000, kind
    finally:
        for query in queries:
            await asyncio.to_thread(query.stop)


async def test_a_topic_tiered_to_its_end_is_read_without_a_task_for_the_broker(
    spark, kafka_tiering
):
    """Once the broker's log ends where the remote tier does (idle, Kafka rolls the
    active segment under local retention and tiers it), a batch plans a task for each
    partition's remote segments (far below remotelog.maxBytesPerPartition) and none
    for the broker, whose log end it fixed when planning."""
    broker = kafka_tiering.broker
    name, topic_id = await asyncio.to_thread(tiered_topic, kafka_tiering, "whole")
    ends = await asyncio.to_thread(log_ends, kafka_tiering.bootstrap, name)

    def tiered_to_the_end() -> bool:
        tiered = broker.list_offsets(name, "latest-tiered")
        return all(tiered.get(p) == end - 1 for p, end in ends.items())

    await eventually(
        lambda: asyncio.to_thread(tiered_to_the_end), timeout_s=TIERING_TIMEOUT_S, interval_s=1
    )
    segments = [
        await kafka_tiering.stack.segments(
            TopicIdPartition(topic_id, name, p), {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
        )
        for p in range(PARTITIONS)
    ]
    frame = source(spark, kafka_tiering, "remotelog", subscribe=name)
    tasks = await asyncio.to_thread(lambda: frame.rdd.getNumPartitions())
    assert all(segments)
    assert tasks == PARTITIONS
    rows = await side_by_side(spark, kafka_tiering, subscribe=name)
    assert len(rows) == PARTITIONS * RECORDS
