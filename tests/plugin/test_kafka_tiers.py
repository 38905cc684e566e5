"""Apache Kafka tiers a topic through the remotelog plugin, and serves it back.

Kafka's own RemoteLogManager copies each rolled segment through the plugin into
the segment store and records it in the metadata manager; local retention then
deletes it from the broker's disk. A plain Kafka consumer reading from offset 0
gets every record from Kafka, which fetches the history through the plugin; the
TieredConsumer reads the same history straight from the remote tier.
"""

import asyncio
import os
import signal
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
)
from support.kafka_admin import create_topic, produce_random, set_topic_config
from support.topics import read_to_end
from support.waiting import eventually

from remotelog.client import TieredConsumer
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState

from .conftest import BY_URL, NOT_BY_URL, SEGMENT_BYTES

PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 800  # per partition: 600-byte values roll about two segments
TXN_RECORDS = 40
TIERING_TIMEOUT_S = 180
# The store-kill test's segments: 16 MiB, filled and rolled by 17 MiB a partition.
KILLED_SEGMENT_BYTES = 16 * 1024 * 1024
KILLED_RECORDS = 17 * 1024
# Enough to roll and copy the small segments after a fault.
MORE_RECORDS = 1500


@dataclass
class Produced:
    """What each partition was sent, in order: (key, value, headers, aborted)."""

    records: dict[int, list[tuple]] = field(default_factory=lambda: defaultdict(list))

    def expected(self, partition: int, committed_only: bool) -> list[tuple]:
        return [r[:3] for r in self.records[partition] if not (committed_only and r[3])]

    def extend(self, more: "Produced") -> None:
        """`more`, produced after these, appended partition by partition."""
        for partition, records in more.records.items():
            self.records[partition] += records


def create_tiered_topic(
    bootstrap: str, topic: str, replicas: list[list[int]] | None = None, **config: str
) -> uuid.UUID:
    """A tiered topic of PARTITIONS partitions, on the given replicas (node ids, the
    preferred leader first) or one replica each; its topic id."""
    settings = {
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.ms": "1000",
        "retention.ms": "-1",
        **config,
    }
    return create_topic(bootstrap, topic, partitions=PARTITIONS, replicas=replicas, config=settings)


def produce_every_kind(
    bootstrap: str,
    topic: str,
    codecs: tuple[str, ...] = CODECS,
    records: int = RECORDS_PER_CODEC,
    tail_records: int = RECORDS_PER_CODEC,
) -> Produced:
    """`records` of each codec a partition through an idempotent producer, headers, then a
    committed and an aborted transaction, then `tail_records` plain ones so both
    transactions are in rolled segments."""
    produced = Produced()

    def send(producer: Producer, partition: int, number: int, codec: str, aborted=False):
        key = f"{codec}-{partition}-{number}".encode()
        value = os.urandom(600)
        headers = [("codec", codec.encode()), ("n", str(number).encode())] if number % 2 else []
        producer.produce(topic, value, key, partition=partition, headers=headers)
        produced.records[partition].append((key, value, tuple(headers), aborted))

    for codec in codecs:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": codec,
                "linger.ms": 5,
            }
        )
        for number in range(records):
            for partition in range(PARTITIONS):
                send(producer, partition, number, codec)
        assert producer.flush(60) == 0
    transactional = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tiered-{topic}"}
    )
    transactional.init_transactions(30)
    for commit in (True, False):
        transactional.begin_transaction()
        for number in range(TXN_RECORDS):
            for partition in range(PARTITIONS):
                send(transactional, partition, number, "txn", aborted=not commit)
        assert transactional.flush(30) == 0
        if commit:
            transactional.commit_transaction(30)
        else:
            transactional.abort_transaction(30)
    tail = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for number in range(tail_records):
        for partition in range(PARTITIONS):
            send(tail, partition, number, "tail")
    assert tail.flush(60) == 0
    return produced


def wait_until_tiered(broker, topic: str, past: int = 0) -> dict[int, int]:
    """Until Kafka's earliest local offset (ListOffsets -4) of every partition has moved
    past `past`: segments were tiered, then deleted locally. The offsets."""
    deadline = time.monotonic() + TIERING_TIMEOUT_S
    while True:
        local = broker.list_offsets(topic, "earliest-local")
        if len(local) == PARTITIONS and min(local.values()) > past:
            return local
        assert time.monotonic() < deadline, (
            f"not tiered: earliest local {local}\n{broker.log_tail()}"
        )
        time.sleep(1)


def active_base_offset(broker, topic: str, partition: int) -> int:
    """The base offset of the partition's active segment on the broker: its newest log file
    (local retention deletes only rolled ones)."""
    logs = (broker.data_dir / f"{topic}-{partition}").glob("*.log")
    return max((int(log.stem) for log in logs), default=-1)


async def agreed_tiered_ends(broker, stack, topic_id: uuid.UUID, topic: str) -> dict[int, int]:
    """The last tiered offset of each partition once Kafka's ListOffsets -5 (latest
    tiered) and the metadata manager's listing agree, and every segment Kafka rolled is
    tiered (the last tiered offset is the one before the active segment's base offset):
    Kafka goes on copying segments rolled before the last write, one at a time, and the
    two can agree between two copies. Each partition's tiered range starts at 0."""

    async def tiered_ends() -> dict[int, int]:
        ends = {}
        for partition in range(PARTITIONS):
            tip = TopicIdPartition(topic_id, topic, partition)
            copied = await stack.segments(tip, {RemoteLogSegmentState.COPY_SEGMENT_FINISHED})
            assert copied, f"{topic}-{partition}: nothing tiered"
            assert copied[0].start_offset == 0
            ends[partition] = max(s.end_offset for s in copied)
            assert stack.objects_of(tip)
        return ends

    async def agreed() -> dict[int, int] | None:
        ours = await tiered_ends()
        kafkas = await asyncio.to_thread(broker.list_offsets, topic, "latest-tiered")
        all_copied = all(ours[p] + 1 == active_base_offset(broker, topic, p) for p in ours)
        return ours if kafkas == ours and all_copied and ours == await tiered_ends() else None

    return await eventually(agreed, timeout_s=TIERING_TIMEOUT_S, interval_s=1)


def as_read(messages) -> list[tuple]:
    return [(m.key(), m.value(), tuple(m.headers() or ())) for m in messages]


async def served_through_kafka(broker, topic: str, produced: Produced) -> dict:
    """Every partition read from offset 0 through Kafka, under both isolation levels,
    equal to what was produced: the tiered part came through the plugin. The messages
    read, by partition and isolation level."""
    earliest = await asyncio.to_thread(broker.list_offsets, topic, "-2")
    assert earliest == dict.fromkeys(range(PARTITIONS), 0)
    read = {}
    for partition in range(PARTITIONS):
        for isolation, committed_only in (("read_uncommitted", False), ("read_committed", True)):
            messages = await asyncio.to_thread(
                read_to_end, broker.bootstrap_servers, topic, partition, isolation
            )
            assert messages[0].offset() == 0
            assert as_read(messages) == produced.expected(partition, committed_only), isolation
            read[partition, isolation] = messages
    return read


async def test_kafka_tiers_through_remotelog_and_serves_the_whole_history(kafka_tiering, spark):
    broker, stack = kafka_tiering.broker, kafka_tiering.stack
    topic = f"tiered-{uuid.uuid4().hex[:6]}"
    topic_id = await asyncio.to_thread(create_tiered_topic, broker.bootstrap_servers, topic)
    produced = await asyncio.to_thread(produce_every_kind, broker.bootstrap_servers, topic)
    local = await asyncio.to_thread(wait_until_tiered, broker, topic)

    ends = await agreed_tiered_ends(broker, stack, topic_id, topic)
    for partition in range(PARTITIONS):
        # Local retention deleted only what was tiered.
        assert local[partition] <= ends[partition] + 1
    # ListOffsets -2 (the log starts at 0, in the remote tier) and the history through
    # Kafka, which read it from remotelog through the plugin.
    await served_through_kafka(broker, topic, produced)
    # Kafka read the logs from the files the store named, not through its stream.
    log = broker.log_path.read_text().splitlines()
    assert [line for line in log if BY_URL in line]
    assert not [line for line in log if any(n in line for n in NOT_BY_URL)]
    # The store read the segments' files itself: every copy went by path.
    copies = [line for line in log if "Copied segment" in line]
    assert copies
    assert all("to the segment store by path" in line for line in copies), copies[:3]
    # Every setting the broker was given is one the plugin knows.
    assert not [line for line in log if "is not a setting of the remotelog plugin" in line]
    await graphed_by_jmx(broker, stack, topic_id, topic)

    # Around Kafka: the same history straight from the remote tier, the tail from Kafka.
    async with TieredConsumer.connect(
        f"127.0.0.1:{stack.running[0].service.port}",
        f"127.0.0.1:{stack.metadata.service.port}",
        bootstrap_servers=broker.bootstrap_servers,
    ) as consumer:
        for partition in range(PARTITIONS):
            tip = TopicIdPartition(topic_id, topic, partition)
            records = [r async for r in consumer.read(tip, "earliest")]
            found = [(r.key, r.value, tuple(r.headers)) for r in records]
            assert found == produced.expected(partition, committed_only=False)

    # And from Spark, with the options of Spark's Kafka source.
    frame = (
        spark.read.format("remotelog")
        .option("remotelog.fetch.address", f"127.0.0.1:{stack.running[0].service.port}")
        .option("remotelog.metadata.address", f"127.0.0.1:{stack.metadata.service.port}")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        .option("subscribe", topic)
        .load()
        .orderBy("partition", "offset")
    )
    rows = await asyncio.to_thread(frame.select("partition", "key", "value", "headers").collect)
    for partition in range(PARTITIONS):
        found = [
            (r.key, r.value, tuple((h.key, h.value) for h in r.headers or ()))
            for r in rows
            if r.partition == partition
        ]
        assert found == produced.expected(partition, committed_only=True)


PLUGIN_METRICS = "remotelog.kafka.plugin:type=remote-{}-metrics"
STORAGE_METRICS = PLUGIN_METRICS.format("storage-manager")
METADATA_METRICS = PLUGIN_METRICS.format("log-metadata-manager")
# The same, as a Kafka 4.1+ broker registers them for a plugin on its class path.
BROKER_METRICS = "kafka.server:type=plugins,config=remote.log.{}.manager.class.name,class={}"
BROKER_STORAGE_METRICS = BROKER_METRICS.format("storage", "RemotelogStorageManager")
BROKER_METADATA_METRICS = BROKER_METRICS.format("metadata", "RemotelogMetadataManager")


async def graphed_by_jmx(broker, stack, topic_id, topic: str) -> None:
    """The plugin's metrics, read through the broker's JMX with Kafka's JmxTool, count
    at least what this topic's tiering and reads did (the module's other topics add)."""
    tiered = sum(len(s) for s in (await live_segments(stack, topic_id, topic)).values())

    def read(name: str, attribute: str) -> float:
        [value] = broker.jmx(name, attribute=attribute).values()
        return value

    def calls(metrics: str, method: str) -> float:
        return read(f"{metrics},method={method}", "calls-total")

    assert await asyncio.to_thread(calls, STORAGE_METRICS, "CopyLogSegmentFiles") >= tiered
    assert await asyncio.to_thread(calls, METADATA_METRICS, "AddRemoteLogSegmentMetadata") >= tiered
    assert await asyncio.to_thread(read, STORAGE_METRICS, "copy-bytes-total") >= tiered * 1000
    # Read back through Kafka by the store's file URLs, every byte counted as it was read.
    assert await asyncio.to_thread(read, STORAGE_METRICS, "log-reads-by-url-total") > 0
    assert await asyncio.to_thread(read, STORAGE_METRICS, "fetch-bytes-total") > 0
    assert await asyncio.to_thread(read, METADATA_METRICS, "segment-cache-hits-total") > 0
    assert await asyncio.to_thread(read, METADATA_METRICS, "notifications-waiting") == 0
    # The broker's own registry holds each of them too, read from the plugin's.
    for ours, brokers in (
        (STORAGE_METRICS, BROKER_STORAGE_METRICS),
        (METADATA_METRICS, BROKER_METADATA_METRICS),
    ):
        mirrored = await asyncio.to_thread(broker.jmx, f"{brokers},*", attribute="calls-total")
        direct = await asyncio.to_thread(broker.jmx, f"{ours},*", attribute="calls-total")
        assert {name.split(",", 3)[-1] for name in mirrored} == {
            name.split(",", 1)[-1] for name in direct
        }
    for ours, brokers, attribute in (
        (STORAGE_METRICS, BROKER_STORAGE_METRICS, "copy-bytes-total"),
        (METADATA_METRICS, BROKER_METADATA_METRICS, "segment-cache-hits-total"),
    ):
        # Counters only grow: the broker's read, between two reads of the plugin's own.
        before = await asyncio.to_thread(read, ours, attribute)
        mirrored = await asyncio.to_thread(read, brokers, attribute)
        assert before <= mirrored <= await asyncio.to_thread(read, ours, attribute)


def produce_plain(bootstrap: str, topic: str, records: int) -> dict[int, list[bytes]]:
    """`records` incompressible 1 KiB values to each of the PARTITIONS partitions."""
    return produce_random(bootstrap, topic, records, PARTITIONS)


def uploads_of(stack, topic: str):
    """Whether the filesystem store holds a half-written upload of the topic: a check."""
    root = Path(stack.store.config.storage_root)
    return lambda: any(root.glob(f"{topic}-*/*/*.tmp"))


def wait_for_offsets(broker, topic: str, time_spec: str, done, what: str) -> dict[int, int]:
    deadline = time.monotonic() + TIERING_TIMEOUT_S
    while True:
        found = broker.list_offsets(topic, time_spec)
        if len(found) == PARTITIONS and done(found):
            return found
        assert time.monotonic() < deadline, f"{what}: {time_spec} {found}\n{broker.log_tail()}"
        time.sleep(1)


async def copied_past(broker, topic: str, offset: int) -> None:
    """Until local retention deleted every partition of `topic` past `offset`: Kafka
    copied that far."""
    await asyncio.to_thread(
        wait_for_offsets,
        broker,
        topic,
        "earliest-local",
        lambda o: min(o.values()) > offset,
        "copy",
    )


async def live_segments(stack, topic_id, topic: str) -> dict[int, list]:
    return {
        p: await stack.segments(
            TopicIdPartition(topic_id, topic, p), {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
        )
        for p in range(PARTITIONS)
    }


async def retention_settled(broker, stack, topic_id, topic: str) -> tuple[dict, dict]:
    """Once retention moved every partition's log start past 0 and deleted the remote
    segments below it (Kafka moves the log start first): the earliest offsets, and the
    finished segments, by partition."""

    async def settled():
        earliest = await asyncio.to_thread(broker.list_offsets, topic, "earliest")
        live = await live_segments(stack, topic_id, topic)
        starts = {p: min(s.start_offset for s in live[p]) for p in range(PARTITIONS)}
        return (earliest, live) if starts == earliest and min(earliest.values()) > 0 else None

    return await eventually(settled, timeout_s=TIERING_TIMEOUT_S, interval_s=1)


async def test_retention_and_topic_deletion_delete_remote_segments_through_the_plugin(
    kafka_tiering,
):
    broker, stack = kafka_tiering.broker, kafka_tiering.stack
    bootstrap = broker.bootstrap_servers
    topic = f"retained-{uuid.uuid4().hex[:6]}"
    # retention.bytes counts the local and the remote log, as in Kafka.
    topic_id = await asyncio.to_thread(
        create_tiered_topic, bootstrap, topic, **{"retention.bytes": str(3 * SEGMENT_BYTES)}
    )
    values = await asyncio.to_thread(produce_plain, bootstrap, topic, 6000)

    # retention.bytes: the oldest remote segments go, through the plugin.
    await asyncio.to_thread(
        wait_for_offsets, broker, topic, "earliest", lambda o: min(o.values()) > 0, "size"
    )

    earliest, live = await retention_settled(broker, stack, topic_id, topic)
    for partition in range(PARTITIONS):
        messages = await asyncio.to_thread(
            read_to_end, bootstrap, topic, partition, start=earliest[partition]
        )
        assert messages[0].offset() == earliest[partition]
        assert [m.value() for m in messages] == values[partition][earliest[partition] :]
    report = await stack.scrub()
    assert (report.orphans, report.uploads) == ([], [])

    # retention.ms: everything tiered is older than a second now.
    await asyncio.to_thread(set_topic_config, bootstrap, topic, "retention.ms", 1000)
    tiered_end = {p: max(s.end_offset for s in live[p]) for p in range(PARTITIONS)}
    await asyncio.to_thread(
        wait_for_offsets,
        broker,
        topic,
        "earliest",
        lambda o: all(o[p] > tiered_end[p] for p in range(PARTITIONS)),
        "time",
    )

    # Deleting the topic deletes its remote segments: nothing of it is left in the store.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]

    async def emptied() -> bool:
        return all(stack.objects_of(tip) == {} for tip in tips)

    await eventually(emptied, timeout_s=TIERING_TIMEOUT_S)
    report = await stack.scrub()
    assert (report.orphans, report.uploads) == ([], [])


async def copies_resume(broker, topic: str, upload_under_way, meanwhile=None):
    """After a fault held up a copy of `topic`'s KILLED_RECORDS: small segments again and
    MORE_RECORDS more (returned), `meanwhile` awaited, then Kafka copies past the held-up
    records and deletes the failed attempt, with the upload it left."""
    bootstrap = broker.bootstrap_servers
    # Small segments again: the active one rolls at the next write.
    await asyncio.to_thread(set_topic_config, bootstrap, topic, "segment.bytes", SEGMENT_BYTES)
    more = await asyncio.to_thread(produce_plain, bootstrap, topic, MORE_RECORDS)
    if meanwhile is not None:
        await meanwhile()
    await copied_past(broker, topic, KILLED_RECORDS)
    await eventually(lambda: not upload_under_way(), timeout_s=TIERING_TIMEOUT_S)
    return more


async def test_a_store_killed_mid_copy_and_a_killed_broker_lose_nothing(kafka_tiering):
    """The store, as a process of its own, is SIGKILLed while Kafka copies a segment into
    it by path (its upload half-written) and comes back on its address; then the broker is
    SIGKILLed and restarted from its log dir. Kafka retries the copies and deletes the
    failed one's segment, nothing is lost, and the store holds no orphan or upload."""
    copies = await store_killed_mid_copy(kafka_tiering.broker, kafka_tiering.stack, uploads_of)
    assert all("to the segment store by path" in line for line in copies), copies[:3]


async def store_killed_mid_copy(broker, stack, uploads_under_way) -> list[str]:
    """The store-kill test on `broker` and `stack`; `uploads_under_way(stack, topic)`: a
    check of whether a copy of `topic` is under way. The broker's log lines of the topic's
    copies, for the caller to check the way they went."""
    bootstrap = broker.bootstrap_servers
    topic = f"faults-{uuid.uuid4().hex[:6]}"
    # Segments large enough that a copy is seen under way (0.3 s or more here).
    big = {"segment.bytes": str(KILLED_SEGMENT_BYTES)}
    topic_id = await asyncio.to_thread(create_tiered_topic, bootstrap, topic, **big)
    upload_under_way = uploads_under_way(stack, topic)
    store = await stack.serve_apart("segment-store")

    try:
        # Watched while the records go in: Kafka copies a segment as soon as it rolls.
        producing = asyncio.create_task(
            asyncio.to_thread(produce_plain, bootstrap, topic, KILLED_RECORDS)
        )
        await eventually(upload_under_way, timeout_s=TIERING_TIMEOUT_S, interval_s=0.01)
        store.send_signal(signal.SIGKILL)
        values = await producing
    finally:
        store.kill()
        store.wait()
    assert upload_under_way()  # what the killed copy wrote is still there

    async def store_back() -> None:
        await asyncio.sleep(3)  # Kafka's copy tasks run, and fail, meanwhile
        await stack.start_store()

    more = await copies_resume(broker, topic, upload_under_way, store_back)

    await asyncio.to_thread(broker.kill)
    await asyncio.to_thread(broker.start)
    # The plugin's metadata manager is ready again, and reads and copies go on.
    latest = await asyncio.to_thread(produce_plain, bootstrap, topic, MORE_RECORDS)
    copied = KILLED_RECORDS + MORE_RECORDS
    await copied_past(broker, topic, copied)
    for partition in range(PARTITIONS):
        messages = await asyncio.to_thread(read_to_end, bootstrap, topic, partition)
        expected = values[partition] + more[partition] + latest[partition]
        assert [m.value() for m in messages] == expected
    live = await live_segments(stack, topic_id, topic)
    for partition in range(PARTITIONS):
        starts = [s.start_offset for s in live[partition]]
        assert starts[0] == 0
        assert starts == sorted(set(starts))  # one copy of each segment
    report = await stack.scrub()
    assert (report.orphans, report.uploads) == ([], [])
    copies = [line for line in broker.run_log() if "Copied segment" in line and topic in line]
    assert copies
    return copies
