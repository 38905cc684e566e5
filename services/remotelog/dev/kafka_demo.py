"""`remotelog demo`: Apache Kafka tiering through the remotelog plugin, checked end to end.

A topic with `remote.storage.enable=true` is written through Kafka's protocol
(every codec, keys, headers, a committed and an aborted transaction) and read back
by a plain Kafka consumer while it is on the broker's disk. Then local retention
is turned on: Kafka's own RemoteLogManager has tiered each rolled segment through
the plugin into the segment store, and deletes it locally. A plain consumer reads
the whole history again through Kafka, which now fetches it from remotelog; Spark
reads it straight from the remote tier through the connector; deleting the topic
empties the store. Any difference fails the demo naming the first differing record.
"""

from __future__ import annotations

import asyncio
import importlib
import random
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from remotelog.client.metadata import MetadataClient
from remotelog.core.model import RemoteLogSegmentMetadata
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.broker import BrokerError
from remotelog.dev.demo import (
    MIB,
    OPTIONS,
    PHASE_TIMEOUT_S,
    DemoConfig,
    DemoMismatch,
    ReportBase,
    phase,
    spark_scan,
    store_files,
)
from remotelog.dev.disk import disk_bytes
from remotelog.dev.kafka_broker import KafkaBroker
from remotelog.dev.stack import DevStack

TOPIC = "demo"
PARTITIONS = 3
SEGMENT_BYTES = MIB  # Kafka's floor for segment.bytes
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TRANSACTION_RECORDS = 50
# About 500 bytes a record: two one-MiB segments a partition roll and are tiered.
MIN_RECORDS = 12_000
POLL_S = 0.5
# What a record is compared on: (key, value, headers).
Expected = tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]


@dataclass
class KafkaDemoReport(ReportBase):
    broker: str = ""
    records_verified_local: int = 0
    records_verified_remote: int = 0
    segments_tiered: int = 0
    bytes_tiered: int = 0
    local_bytes_before: int = 0
    local_bytes_after: int = 0
    tiering_s: float = 0.0
    consumer_local_rows_s: float = 0.0
    consumer_remote_rows_s: float = 0.0

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("broker", f"{self.broker} with the remotelog plugin"),
            self.written_row(),
            (
                "records verified",
                f"{self.records_verified_local:,} from local disk, "
                f"{self.records_verified_remote:,} from remotelog (read_committed, through Kafka)",
            ),
            (
                "tiered by Kafka",
                f"{self.segments_tiered} segments, {self.bytes_tiered / MIB:.1f} MB, "
                f"{self.bytes_tiered / MIB / self.tiering_s:.1f} MB/s from the first write "
                "to the last segment tiered",
            ),
            (
                "bytes local",
                f"{self.local_bytes_before:,} before local retention, "
                f"{self.local_bytes_after:,} after",
            ),
            (
                "Kafka consumer",
                f"{self.consumer_local_rows_s:,.0f} records/s from local disk, "
                f"{self.consumer_remote_rows_s:,.0f} records/s from remotelog",
            ),
            self.spark_row("rows (history from remotelog)"),
            *self.closing_rows(),
        ]


@dataclass
class Written:
    """What each partition must read back under read_committed, and the totals."""

    expected: dict[int, list[Expected]] = field(default_factory=dict)
    records: int = 0
    aborted: int = 0


def _kafka_admin() -> Any:
    """confluent-kafka's admin module, untyped: its type hints do not export what it defines."""
    return importlib.import_module("confluent_kafka.admin")


def _admin(broker: KafkaBroker) -> Any:
    return _kafka_admin().AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create_topic(broker: KafkaBroker) -> None:
    """Tiered, one-MiB segments, local retention off until the local read is measured."""
    config = {
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "retention.ms": "-1",
        "local.retention.ms": "-2",  # as retention.ms: everything stays local for now
    }
    topic = _kafka_admin().NewTopic(TOPIC, PARTITIONS, 1, config=config)
    admin = _admin(broker)  # held: the futures fail if their client is collected
    admin.create_topics([topic])[TOPIC].result(60)


def write(broker: KafkaBroker, config: DemoConfig) -> Written:
    """Every codec through idempotent producers, keys (none on every seventh record),
    headers on every third, a committed and an aborted transaction on each partition."""
    from confluent_kafka import Producer

    rng = random.Random(config.seed)
    values = [rng.randbytes(rng.randint(200, 800)) for _ in range(512)]
    written = Written({p: [] for p in range(PARTITIONS)})
    per_codec = max(config.records // PARTITIONS // len(CODECS), 1)

    def send(producer: Any, partition: int, number: int, aborted: bool = False) -> None:
        key = None if number % 7 == 0 else f"user-{(number * 31 + partition) % 1000}".encode()
        headers = (("source", b"demo"), ("n", str(number).encode())) if number % 3 == 0 else ()
        value = values[number % len(values)]
        producer.produce(TOPIC, value, key, partition=partition, headers=list(headers))
        written.records += 1
        if aborted:
            written.aborted += 1
        else:
            written.expected[partition].append((key, value, headers))

    number = 0
    for codec in CODECS:
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "enable.idempotence": True,
                "compression.type": codec,
                "linger.ms": 10,
            }
        )
        for _ in range(per_codec):
            for partition in range(PARTITIONS):
                send(producer, partition, number)
            number += 1
        if producer.flush(60):
            raise DemoMismatch(f"the {codec} producer could not deliver every record")
    transactional = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"demo-{uuid.uuid4()}"}
    )
    transactional.init_transactions(60)
    for commit in (True, False):
        transactional.begin_transaction()
        for _ in range(TRANSACTION_RECORDS):
            for partition in range(PARTITIONS):
                send(transactional, partition, number, aborted=not commit)
            number += 1
        transactional.flush(60)
        if commit:
            transactional.commit_transaction(60)
        else:
            transactional.abort_transaction(60)
    return written


def read_through_kafka(broker: KafkaBroker, written: Written) -> float:
    """Every partition from offset 0 by a plain consumer (read_committed), compared with
    what was written; the records/s."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"demo-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    found: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
    ended: set[int] = set()
    began = time.perf_counter()
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    try:
        while len(ended) < PARTITIONS:
            if time.monotonic() > deadline:
                raise DemoMismatch(f"the consumer read {found} records in {PHASE_TIMEOUT_S} s")
            for message in consumer.consume(1000, 1.0):
                partition = int(message.partition() or 0)
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ended.add(partition)
                        continue
                    raise DemoMismatch(f"{TOPIC}-{partition}: {error}")
                got = (message.key(), message.value(), tuple(message.headers() or ()))
                index = found[partition]
                want = written.expected[partition]
                if index >= len(want) or got != want[index]:
                    wanted = want[index] if index < len(want) else None
                    raise DemoMismatch(
                        f"{TOPIC}-{partition} offset {message.offset()}: read {got!r}, "
                        f"written {wanted!r}"
                    )
                found[partition] += 1
        seconds = time.perf_counter() - began
    finally:
        consumer.close()
    for partition, count in found.items():
        if count != len(written.expected[partition]):
            raise DemoMismatch(
                f"{TOPIC}-{partition}: read {count} records, written "
                f"{len(written.expected[partition])}"
            )
    return sum(found.values()) / seconds


def local_bytes(broker: KafkaBroker) -> int:
    """The disk the topic's partition directories take."""
    return disk_bytes(broker.data_dir / f"{TOPIC}-{p}" for p in range(PARTITIONS))


# A segment's files, deleted (renamed, awaiting removal) or not.
_SEGMENT_FILE = re.compile(r"(\d{20})\.(log|index|timeindex|txnindex)(\.deleted)?")


def local_segments(broker: KafkaBroker) -> dict[int, list[int]]:
    """The base offsets of each partition's segments with files on the broker's disk
    (those deleted but not yet removed too), ascending; the last is the active one."""
    found: dict[int, list[int]] = {}
    for p in range(PARTITIONS):
        names = (f.name for f in (broker.data_dir / f"{TOPIC}-{p}").iterdir())
        matches = (_SEGMENT_FILE.fullmatch(name) for name in names)
        found[p] = sorted({int(m[1]) for m in matches if m})
    return found


def set_topic_config(broker: KafkaBroker, key: str, value: str) -> None:
    admin = _kafka_admin()
    entry = admin.ConfigEntry(key, value, incremental_operation=admin.AlterConfigOpType.SET)
    resource = admin.ConfigResource("TOPIC", TOPIC, incremental_configs=[entry])
    client = _admin(broker)
    client.incremental_alter_configs([resource])[resource].result(60)


async def wait_until_tiered(
    broker: KafkaBroker, metadata: MetadataClient, progress: Callable[[int, int], None]
) -> list[RemoteLogSegmentMetadata]:
    """Until every rolled segment is tiered (the metadata manager lists it finished) and
    gone from the broker's disk. The tiered segments."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while True:
        local = await asyncio.to_thread(local_segments, broker)
        summaries = await metadata.list_remote_partitions(TOPIC)
        tiered = {s.topic_id_partition.partition: s.latest_tiered_offset for s in summaries}
        active = {p: bases[-1] for p, bases in local.items()}
        progress(sum(t + 1 for t in tiered.values()), sum(active.values()))
        if all(
            tiered.get(p, -1) + 1 == bases[-1] and len(bases) == 1 for p, bases in local.items()
        ):
            finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            return [
                segment
                for summary in summaries
                async for segment in metadata.list_remote_log_segments(summary.topic_id_partition)
                if segment.state is finished
            ]
        if time.monotonic() > deadline:
            raise DemoMismatch(
                f"after {PHASE_TIMEOUT_S:.0f} s, tiered up to {tiered}, on the broker's disk "
                f"the segments at {local}; the broker's log: {broker.log_path}"
            )
        await asyncio.sleep(POLL_S)


def check_kafkas_offsets(broker: KafkaBroker) -> None:
    """Kafka's own ListOffsets agree: the earliest local offset (-4) is right after the
    latest tiered one (-5), and the log starts at 0 (-2), in the remote tier."""
    local = broker.list_offsets(TOPIC, "earliest-local")
    tiered = broker.list_offsets(TOPIC, "latest-tiered")
    earliest = broker.list_offsets(TOPIC, "earliest")
    for p in range(PARTITIONS):
        if not (earliest[p] == 0 < local[p] == tiered[p] + 1):
            raise DemoMismatch(
                f"{TOPIC}-{p}: Kafka answers earliest {earliest[p]}, earliest local "
                f"{local[p]}, latest tiered {tiered[p]}"
            )


async def wait_until_deleted(stack: DevStack) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while store_files(stack.segments_dir):
        if time.monotonic() > deadline:
            raise DemoMismatch(f"{stack.segments_dir} still holds the deleted topic's segments")
        await asyncio.sleep(POLL_S)


async def run_kafka_demo(
    stack: DevStack,
    config: DemoConfig,
    *,
    spark: Callable[[], Any] | None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> KafkaDemoReport:
    """The demo on a started stack whose broker loads the plugin (`DevConfig(mode="plugin")`)."""
    from confluent_kafka import KafkaException

    try:
        async with MetadataClient(stack.addresses["metadata-manager"], options=OPTIONS) as client:
            return await _run(stack, client, config, spark, progress)
    except (KafkaException, BrokerError) as exc:
        raise DemoMismatch(f"Kafka: {exc}; the broker's log: {stack.broker.log_path}") from None


async def _run(
    stack: DevStack,
    metadata: MetadataClient,
    config: DemoConfig,
    spark: Callable[[], Any] | None,
    progress: Callable[[int, int], None],
) -> KafkaDemoReport:
    broker = stack.broker
    if not isinstance(broker, KafkaBroker):
        raise DemoMismatch("the plugin demo needs Apache Kafka as the stack's broker")
    report = KafkaDemoReport(broker=broker.version, store_dir=str(stack.segments_dir))
    await asyncio.to_thread(create_topic, broker)
    began_ms = time.time() * 1000
    with phase(report, "write"):
        written = await asyncio.to_thread(write, broker, config)
    report.records_written, report.records_aborted = written.records, written.aborted
    with phase(report, "local read"):
        report.consumer_local_rows_s = await asyncio.to_thread(read_through_kafka, broker, written)
    report.records_verified_local = sum(len(e) for e in written.expected.values())
    report.local_bytes_before = local_bytes(broker)
    with phase(report, "tier"):
        await asyncio.to_thread(set_topic_config, broker, "local.retention.ms", "1000")
        tiered = await wait_until_tiered(broker, metadata, progress)
        if not tiered:
            raise DemoMismatch("no segment rolled, so Kafka tiered nothing: write more records")
        await asyncio.to_thread(check_kafkas_offsets, broker)
    # Kafka copies each segment as it rolls: from the first write to the last segment's
    # COPY_SEGMENT_FINISHED event (its broker's clock, this machine's).
    report.tiering_s = (max(s.event_timestamp_ms for s in tiered) - began_ms) / 1000
    report.segments_tiered = len(tiered)
    report.bytes_tiered = sum(s.segment_size_in_bytes for s in tiered)
    report.local_bytes_after = local_bytes(broker)
    report.store_files_before_delete = store_files(stack.segments_dir)
    with phase(report, "remote read"):
        report.consumer_remote_rows_s = await asyncio.to_thread(read_through_kafka, broker, written)
    report.records_verified_remote = report.records_verified_local
    if spark is not None:
        with phase(report, "spark"):
            # History from the remote tier, the untiered tail from Kafka.
            tail = {"kafka.bootstrap.servers": broker.bootstrap_servers}
            rows, value_bytes, seconds = await asyncio.to_thread(
                spark_scan, spark(), stack.addresses, TOPIC, **tail
            )
        expected_bytes = sum(len(e[1]) for part in written.expected.values() for e in part)
        if (rows, value_bytes) != (report.records_verified_local, expected_bytes):
            raise DemoMismatch(
                f"Spark counted {rows} records of {value_bytes} value bytes; written "
                f"{report.records_verified_local} of {expected_bytes}"
            )
        report.spark_rows, report.spark_rows_s = rows, rows / seconds
    with phase(report, "delete"):
        admin = _admin(broker)
        await asyncio.to_thread(lambda: admin.delete_topics([TOPIC])[TOPIC].result(60))
        await wait_until_deleted(stack)
    report.store_files_after_delete = store_files(stack.segments_dir)
    return report
