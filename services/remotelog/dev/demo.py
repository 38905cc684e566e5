"""`remotelog demo`: the services doing their job on a dev stack, checked end to end.

A simulated broker writes a three-partition topic as Kafka writes it (every codec,
keys, headers, a committed and an aborted transaction), the copy scheduler tiers
the rolled segments and local retention deletes them, the fetch service serves
every offset back (Fetch, as a broker asks) and the TieredConsumer reads every
record (read_committed), each compared with what was written; a Spark job reads
the topic through the connector; the partition remover deletes the topic and the
store is left empty. Any difference fails the demo with the first differing record.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from remotelog.client import ClientOptions
from remotelog.client.copy_scheduler import CopySchedulerClient, PartitionAssignment
from remotelog.client.partition_remover import PartitionRemoverClient
from remotelog.client.remote_fetch import FetchPartition, RemoteFetchClient
from remotelog.client.tiered_consumer import TieredConsumer
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.dev.disk import disk_bytes
from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.dev.stack import DevStack
from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.records import Record, iter_batches

TOPIC = "demo"
PARTITIONS = 3
BATCH_RECORDS = 50
SEGMENTS_PER_PARTITION = 8
PRODUCER_ID = 4000
# Three batches a partition at least: room for the two transactions.
MIN_RECORDS = PARTITIONS * BATCH_RECORDS * 3
FETCH_MAX_BYTES = 256 * 1024
POLL_S = 0.1
PHASE_TIMEOUT_S = 300.0
MIB = 1024 * 1024
OPTIONS = ClientOptions(timeout_s=60)
CODECS = list(CompressionType)
# What a record is compared on: (offset, timestamp, key, value, headers).
Expected = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class DemoMismatch(Exception):
    """What was read differs from what was written; the message names the first record."""


@dataclass(frozen=True)
class DemoConfig:
    records: int = 60_000  # at least MIN_RECORDS
    seed: int = 405


@dataclass
class ReportBase:
    """What every demo reports: the records, Spark's count, the store, the phases."""

    records_written: int = 0
    records_aborted: int = 0
    spark_rows: int | None = None
    spark_rows_s: float | None = None
    store_files_before_delete: int = 0
    store_files_after_delete: int = 0
    store_dir: str = ""
    phases_s: dict[str, float] = field(default_factory=dict)

    def written_row(self) -> tuple[str, str]:
        return ("records written", f"{self.records_written:,} ({self.records_aborted} aborted)")

    def spark_row(self, what: str = "rows") -> tuple[str, str]:
        if self.spark_rows_s is None:
            return ("spark", "skipped (pip install 'remotelog[spark]')")
        return ("spark", f"{self.spark_rows:,} {what}, {self.spark_rows_s:,.0f} rows/s")

    def closing_rows(self) -> list[tuple[str, str]]:
        """The store before and after the topic's deletion, then each phase's time."""
        return [
            (
                "store",
                f"{self.store_dir}: {self.store_files_before_delete} files, "
                f"{self.store_files_after_delete} after the topic deletion",
            ),
            *((f"{name} phase", f"{seconds:.1f} s") for name, seconds in self.phases_s.items()),
        ]


@dataclass
class DemoReport(ReportBase):
    records_verified: int = 0
    segments_rolled: int = 0
    segments_tiered: int = 0
    local_bytes_before: int = 0
    local_bytes_after: int = 0
    copy_mb_s: float = 0.0
    fetch_mb_s: float = 0.0
    fetch_p99_ms: float = 0.0

    def rows(self) -> list[tuple[str, str]]:
        return [
            self.written_row(),
            ("records verified", f"{self.records_verified:,} (read_committed)"),
            ("segments tiered", f"{self.segments_tiered} of {self.segments_rolled} rolled"),
            (
                "bytes local",
                f"{self.local_bytes_before:,} before, {self.local_bytes_after:,} after",
            ),
            ("copy", f"{self.copy_mb_s:.1f} MB/s"),
            ("fetch", f"{self.fetch_mb_s:.1f} MB/s, p99 Fetch {self.fetch_p99_ms:.1f} ms"),
            self.spark_row(),
            *self.closing_rows(),
        ]


@dataclass
class WrittenPartition:
    log: PartitionLog
    tip: TopicIdPartition
    expected: list[Expected]
    rolled_ends: list[int]  # last offset of each rolled segment
    records: int  # data records written, aborted ones included
    log_bytes: int  # bytes of the rolled segments' .log files


class Timed(Protocol):
    """A report with the seconds of each phase."""

    phases_s: dict[str, float]


@contextlib.contextmanager
def phase(report: Timed, name: str) -> Iterator[None]:
    began = time.perf_counter()
    yield
    report.phases_s[name] = time.perf_counter() - began


def write_topic(log_dir: Path, config: DemoConfig) -> list[WrittenPartition]:
    """The topic as a broker writes it; per partition, what read_committed must return."""
    rng = random.Random(config.seed)
    topic_id = uuid.uuid4()
    per_partition = max(config.records // PARTITIONS, BATCH_RECORDS)
    # About 200 bytes a record: SEGMENTS_PER_PARTITION segments whatever the size.
    segment_bytes = max(16 * 1024, per_partition * 200 // SEGMENTS_PER_PARTITION)
    values = [rng.randbytes(rng.randint(40, 300)) for _ in range(512)]
    written = []
    for partition in range(PARTITIONS):
        log = PartitionLog.create(
            log_dir, TOPIC, partition, topic_id, LogConfig(segment_bytes=segment_bytes)
        )
        expected: list[Expected] = []
        first_timestamp = int(time.time() * 1000) - per_partition
        batches = [
            [
                _record(i, first_timestamp + i, values[i % len(values)], partition)
                for i in range(first, min(first + BATCH_RECORDS, per_partition))
            ]
            for first in range(0, per_partition, BATCH_RECORDS)
        ]
        for number, batch in enumerate(batches):
            codec = CODECS[number % len(CODECS)]
            # Partition 0 holds the transactions: a third in, one commits; two thirds
            # in, one aborts (read_committed must hide its records).
            transaction = partition == 0 and number in (len(batches) // 3, 2 * len(batches) // 3)
            header = log.append(
                batch,
                leader_epoch=0,
                compression=codec,
                producer_id=PRODUCER_ID if transaction else -1,
                producer_epoch=0 if transaction else -1,
                transactional=transaction,
            )
            commit = number == len(batches) // 3
            if transaction:
                log.append_marker(
                    commit=commit, producer_id=PRODUCER_ID, producer_epoch=0, leader_epoch=0
                )
            if commit or not transaction:
                expected += [
                    (header.base_offset + i, r.timestamp, r.key, r.value, r.headers)
                    for i, r in enumerate(batch)
                ]
        log.roll()
        log.set_high_watermark(log.log_end_offset)
        rolled = log.segments[:-1]
        written.append(
            WrittenPartition(
                log,
                TopicIdPartition(topic_id, TOPIC, partition),
                expected,
                [segment.next_offset - 1 for segment in rolled],
                sum(len(batch) for batch in batches),
                sum(segment.path(".log").stat().st_size for segment in rolled),
            )
        )
    return written


def _record(i: int, timestamp: int, value: bytes, partition: int) -> Record:
    """Keys on most records (none on every seventh), headers on every third."""
    key = None if i % 7 == 0 else f"user-{(i * 31 + partition) % 1000}".encode()
    headers = (("source", b"demo"), ("n", str(i).encode())) if i % 3 == 0 else ()
    return Record(0, timestamp, key, value, headers)


def store_files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file())


async def tier(
    scheduler: CopySchedulerClient,
    written: list[WrittenPartition],
    progress: Callable[[int, int], None],
) -> int:
    """Hand the partitions to the scheduler (local retention 0 bytes: a tiered segment
    may go) until every rolled segment is tiered and deleted locally; segments tiered."""
    await scheduler.on_partition_leadership_changes(
        [
            PartitionAssignment(
                w.tip,
                w.log.directory,
                0,
                retention_ms=-1,
                retention_bytes=-1,
                local_retention_ms=-1,
                local_retention_bytes=0,
            )
            for w in written
        ]
    )
    total = sum(len(w.rolled_ends) for w in written)
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while True:
        tiered = 0
        for w in written:
            state = await scheduler.partition_state(w.tip)
            tiered += sum(1 for end in w.rolled_ends if end <= state.highest_tiered_offset)
        local_left = sum(1 for w in written for s in w.log.segments[:-1] if s.path(".log").exists())
        progress(tiered, total)
        if tiered == total and local_left == 0:
            return tiered
        if time.monotonic() > deadline:
            raise DemoMismatch(
                f"after {PHASE_TIMEOUT_S:.0f} s, {tiered} of {total} segments tiered and "
                f"{local_left} still on local disk"
            )
        await asyncio.sleep(POLL_S)


async def fetch_all(
    fetch: RemoteFetchClient, written: list[WrittenPartition]
) -> tuple[list[float], int]:
    """Fetch every partition from offset 0 to its end as a broker does, partition by
    partition: each Fetch's latency in ms, and the bytes fetched. Every offset must
    come back, in order."""
    latencies, fetched = [], 0
    for w in written:
        where = f"{w.tip.topic}-{w.tip.partition}"
        offset, end = 0, w.rolled_ends[-1] + 1
        while offset < end:
            began = time.perf_counter()
            (answer,) = await fetch.fetch(
                [FetchPartition(w.tip, offset, partition_max_bytes=FETCH_MAX_BYTES)]
            )
            latencies.append((time.perf_counter() - began) * 1000)
            if answer.error is not None:
                raise DemoMismatch(
                    f"{w.tip.topic}-{w.tip.partition} Fetch at {offset}: {answer.error}"
                )
            fetched += len(answer.records)
            headers = list(iter_batches(bytes(answer.records)))
            if not headers or headers[0].base_offset > offset:
                raise DemoMismatch(f"{where} Fetch at {offset}: no batch holds it")
            offset = headers[-1].last_offset + 1
    return latencies, fetched


async def verify(consumer: TieredConsumer, written: list[WrittenPartition]) -> int:
    """Every record read_committed returns, compared with what was written, in order."""
    verified = 0
    for w in written:
        where = f"{w.tip.topic}-{w.tip.partition}"
        records = consumer.read(w.tip, "earliest")
        index = 0
        async with contextlib.aclosing(records):
            async for record in records:
                got = (record.offset, record.timestamp, record.key, record.value, record.headers)
                want = w.expected[index] if index < len(w.expected) else None
                if got != want:
                    raise DemoMismatch(f"{where}: read {got!r}, written {want!r}")
                index += 1
        if index != len(w.expected):
            raise DemoMismatch(f"{where}: read {index} records, written {len(w.expected)}")
        verified += index
    return verified


def spark_scan(
    spark: Any, addresses: dict[str, str], topic: str = TOPIC, **options: str
) -> tuple[int, int, float]:
    """(rows, sum of value lengths, seconds) of the topic through the connector: the
    second scan of two, the first having warmed up a new JVM and its Python workers."""
    reader = (
        spark.read.format("remotelog")
        .option("remotelog.fetch.address", addresses["remote-fetch"])
        .option("remotelog.metadata.address", addresses["metadata-manager"])
        .option("subscribe", topic)
        .option("isolationLevel", "read_committed")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    frame = reader.load()
    scans = []
    for _ in range(2):
        began = time.perf_counter()
        row = frame.selectExpr("count(*) as n", "sum(length(value)) as bytes").collect()[0]
        scans.append((row.n, row.bytes or 0, time.perf_counter() - began))
    if scans[0][:2] != scans[1][:2]:
        raise DemoMismatch(f"two Spark scans differ: {scans[0][:2]} and {scans[1][:2]}")
    return scans[1]


async def delete_topic(
    stack: DevStack, scheduler: CopySchedulerClient, written: list[WrittenPartition]
) -> None:
    """Stop the partitions on the scheduler, mark them for deletion, wait until done."""
    tips = [w.tip for w in written]
    await scheduler.stop_partitions(tips)
    async with PartitionRemoverClient(
        stack.addresses["partition-remover"], options=OPTIONS
    ) as remover:
        await remover.mark_partitions_for_deletion(tips)
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        for tip in tips:
            while (await remover.deletion_status(tip)).state is not (
                RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
            ):
                if time.monotonic() > deadline:
                    raise DemoMismatch(f"{tip.topic}-{tip.partition} was not deleted in time")
                await asyncio.sleep(POLL_S)


async def run_demo(
    stack: DevStack,
    config: DemoConfig,
    *,
    spark: Callable[[], Any] | None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> DemoReport:
    """The demo on a started stack; `spark` makes the SparkSession (None: no Spark step)."""
    report = DemoReport(store_dir=str(stack.segments_dir))
    addresses = stack.addresses
    with phase(report, "write"):
        written = write_topic(stack.data_dir / "kafka-logs", config)
    report.records_written = sum(w.records for w in written)
    report.records_aborted = report.records_written - sum(len(w.expected) for w in written)
    report.segments_rolled = sum(len(w.rolled_ends) for w in written)
    report.local_bytes_before = disk_bytes(w.log.directory for w in written)
    async with CopySchedulerClient(addresses["copy-scheduler"], options=OPTIONS) as scheduler:
        with phase(report, "tier"):
            report.segments_tiered = await tier(scheduler, written, progress)
        report.local_bytes_after = disk_bytes(w.log.directory for w in written)
        report.store_files_before_delete = store_files(stack.segments_dir)
        log_bytes = sum(w.log_bytes for w in written)
        report.copy_mb_s = log_bytes / MIB / report.phases_s["tier"]
        async with RemoteFetchClient(addresses["remote-fetch"], options=OPTIONS) as fetch:
            with phase(report, "fetch"):
                latencies, fetched_bytes = await fetch_all(fetch, written)
            report.fetch_mb_s = fetched_bytes / MIB / report.phases_s["fetch"]
            latencies.sort()
            report.fetch_p99_ms = latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)]
        consumer = TieredConsumer.connect(
            addresses["remote-fetch"],
            addresses["metadata-manager"],
            isolation_level="read_committed",
        )
        async with consumer:
            with phase(report, "verify"):
                report.records_verified = await verify(consumer, written)
        if spark is not None:
            with phase(report, "spark"):
                session = spark()
                rows, value_bytes, seconds = await asyncio.to_thread(spark_scan, session, addresses)
            expected_bytes = sum(len(e[3] or b"") for w in written for e in w.expected)
            if (rows, value_bytes) != (report.records_verified, expected_bytes):
                raise DemoMismatch(
                    f"Spark counted {rows} records of {value_bytes} value bytes; written "
                    f"{report.records_verified} of {expected_bytes}"
                )
            report.spark_rows, report.spark_rows_s = rows, rows / seconds
        with phase(report, "delete"):
            await delete_topic(stack, scheduler, written)
    report.store_files_after_delete = store_files(stack.segments_dir)
    if report.store_files_after_delete:
        raise DemoMismatch(
            f"{report.store_files_after_delete} files left in {stack.segments_dir} "
            "after the topic deletion"
        )
    return report
