"""Spark: a full scan of a tiered topic through `spark.read.format("remotelog")`.

One partition of RECORDS records (100-byte values, keys, lz4 batches of 500) is
written as a broker writes it, in segments of SEGMENT_MIB MiB, and tiered by the
copy scheduler into the filesystem segment store (each service its own process:
segment-store, metadata-manager on Tansu, copy-scheduler, remote-fetch). Spark
runs `local[2]` in this process; the query is `count(*)`, `sum(length(value))`,
`max(offset)`, in interleaved rounds (common.interleaved): each figure is the
median of per-round ratios, printed with their spread. Against, in the same run:
- the ceiling of Spark's Python data source API: a source yielding prebuilt Arrow
  batches of the same schema, rows and task count, at Spark's Arrow batch size
  and at the connector's, the faster (target >= 0.85x);
- the same connector code (decode, Arrow building, the prefetch thread, the
  frozen worker heap) reading the segment files straight from local disk,
  without the services (target >= 0.8x);
- the same rows as Parquet (zstd) on local disk (reported only).
Spark's Python workers must run this interpreter: PYSPARK_PYTHON is set to it.
Run: .venv/bin/python bench/spark.py [records, default 2000000]
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import statistics
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from common import (
    Report,
    bench_stack,
    interleaved,
    serve_fetch,
    serve_tiering,
    tree_cpu_seconds,
)
from copy_scheduler import tier
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.dev.spark_session import local_session
from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.consumer_records import FetchedRecords, consumer_batches
from remotelog.kafka.records import BatchHeader
from remotelog.spark.prefetch import prefetched
from remotelog.spark.reading import CHUNK_BYTES, columns_to_arrow, freeze_worker_heap
from remotelog.spark.source import KAFKA_SCHEMA

MIB = 1024 * 1024
SEGMENT_MIB = 64
BATCH_RECORDS = 500
# Spark's own Arrow batch size (spark.sql.execution.arrow.maxRecordsPerBatch).
SPARK_ARROW_BATCH_ROWS = 10_000
QUERY = ("count(*) as n", "sum(length(value)) as bytes", "max(offset) as last")


def ceiling_frames(spark: Any, per_task: list[int], chunk_rows: int) -> dict[str, Any]:
    """The Python data source API's ceiling, one rule for every Spark bench: prebuilt
    Arrow batches in the connector's tasks, at Spark's own Arrow batch size and at the
    connector's (the rows of a fetched chunk); ceiling_s takes the faster of the two."""
    return {
        f"ceiling@{rows}": spark.read.format("bench_prebuilt")
        .option("rows", ",".join(map(str, per_task)))
        .option("batch", str(rows))
        .load()
        for rows in sorted({SPARK_ARROW_BATCH_ROWS, chunk_rows})
    }


def ceiling_s(times: Mapping[str, float]) -> float:
    """A round's ceiling: the faster of ceiling_frames' scans."""
    return min(seconds for name, seconds in times.items() if name.startswith("ceiling@"))


def write_partition(log_dir: Path, records: int) -> PartitionLog:
    log = PartitionLog.create(
        log_dir, "bench", 0, uuid.uuid4(), LogConfig(segment_bytes=SEGMENT_MIB * MIB)
    )
    values = [random.randbytes(100) for _ in range(256)]
    for first in range(0, records, BATCH_RECORDS):
        batch = [
            (f"key-{o}".encode(), values[o % len(values)])
            for o in range(first, min(first + BATCH_RECORDS, records))
        ]
        log.append(batch, leader_epoch=0, compression=CompressionType.LZ4)
    log.roll()
    log.set_high_watermark(log.log_end_offset)
    return log


class Files(InputPartition):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class KafkaSchemaSource(DataSource):
    def schema(self) -> StructType:
        return KAFKA_SCHEMA


class LocalFilesSource(KafkaSchemaSource):
    """The connector's decode and Arrow building over the segment files on local disk."""

    @classmethod
    def name(cls) -> str:
        return "bench_local_files"

    def reader(self, schema: Any) -> DataSourceReader:
        return LocalFilesReader(self.options["paths"].split(","))


class LocalFilesReader(DataSourceReader):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def partitions(self) -> list[Files]:
        return [Files(p) for p in self.paths]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Files)
        freeze_worker_heap()
        # As the connector: the next batch decoded in a thread while Spark takes the last.
        yield from prefetched(_decoded(Path(partition.path)))


def _decoded(path: Path) -> Iterator[pa.RecordBatch]:
    data = path.read_bytes()
    for chunk in _chunks(data):
        fetched = FetchedRecords(data, chunk, "bench", 0, 0, None)
        yield columns_to_arrow(fetched.columns(include_headers=False), "bench", 0)


def _chunks(data: bytes) -> Iterator[list[BatchHeader]]:
    """The segment's batches cut like the fetch service's bulk read cuts them: whole
    batches, CHUNK_BYTES a chunk."""
    chunk: list[BatchHeader] = []
    for header in consumer_batches(data):
        chunk.append(header)
        if header.position + header.size - chunk[0].position >= CHUNK_BYTES:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class PrebuiltSource(KafkaSchemaSource):
    """The API's ceiling: Arrow batches built once per task, yielded as fast as it takes."""

    @classmethod
    def name(cls) -> str:
        return "bench_prebuilt"

    def reader(self, schema: Any) -> DataSourceReader:
        rows = [int(n) for n in self.options["rows"].split(",")]
        return PrebuiltReader(rows, int(self.options["batch"]))


class Rows(InputPartition):
    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class PrebuiltReader(DataSourceReader):
    def __init__(self, rows: list[int], batch: int) -> None:
        self.rows = rows
        self.batch = batch

    def partitions(self) -> list[Rows]:
        return [Rows(n) for n in self.rows]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Rows)
        value = random.randbytes(100)
        full = _prebuilt(self.batch, value)
        for _ in range(partition.count // self.batch):
            yield full
        if partition.count % self.batch:
            yield _prebuilt(partition.count % self.batch, value)


def _prebuilt(n: int, value: bytes) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([b"key-000000"] * n, pa.binary()),
            pa.array([value] * n, pa.binary()),
            pa.array(["bench"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


def connector_frame(spark: SparkSession, fetch_port: int, metadata_port: int) -> Any:
    return (
        spark.read.format("remotelog")
        .option("remotelog.fetch.address", f"127.0.0.1:{fetch_port}")
        .option("remotelog.metadata.address", f"127.0.0.1:{metadata_port}")
        .option("subscribe", "bench")
    )


def scan(frame: DataFrame) -> tuple[int, int, int]:
    row = frame.selectExpr(*QUERY).collect()[0]
    return row.n, row.bytes, row.last


def session() -> SparkSession:
    spark = local_session(
        "remotelog-bench", {"spark.driver.memory": "2g", "spark.ui.showConsoleProgress": "false"}
    )
    spark.dataSource.register(LocalFilesSource)
    spark.dataSource.register(PrebuiltSource)
    return spark


async def start_services(
    work: Path, log: PartitionLog, processes: list[Any], bootstrap_servers: str
) -> tuple[int, int]:
    """The services with `log` tiered: the fetch service's and metadata manager's ports."""
    addresses, scheduler_port = serve_tiering(work, bootstrap_servers, processes)
    await tier(scheduler_port, [log])
    _, fetch_port = serve_fetch(work, addresses, processes)
    return fetch_port, int(addresses["metadata.manager.address"].rsplit(":", 1)[1])


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    report = Report("spark")
    with bench_stack("spark") as (work, processes, broker):
        log = write_partition(work / "kafka-logs", records)
        segments = log.segments[:-1]
        files = [str(s.path(".log")) for s in segments]
        fetch_port, metadata_port = asyncio.run(
            start_services(work, log, processes, broker.bootstrap_servers)
        )
        spark = session()
        jvm = spark.sparkContext._gateway.proc.pid
        connector = connector_frame(spark, fetch_port, metadata_port).load()
        # The same, on the store's host: whole segments read from the stored files.
        on_store_host = (
            connector_frame(spark, fetch_port, metadata_port)
            .option("remotelog.segment.store.short.circuit.socket.path", str(work / "store.sock"))
            .load()
        )
        local = spark.read.format("bench_local_files").option("paths", ",".join(files)).load()
        bases = [s.base_offset for s in segments] + [records]
        per_task = [end - first for first, end in itertools.pairwise(bases)]
        chunk_rows = records // sum(len(list(_chunks(Path(f).read_bytes()))) for f in files)
        ceilings = ceiling_frames(spark, per_task, chunk_rows)
        expected = (records, records * 100, records - 1)
        for frame in (connector, on_store_host, local):
            found = scan(frame)
            assert found == expected, f"{found} != {expected}"
        assert all(scan(frame)[0] == records for frame in ceilings.values())
        parquet = work / "parquet"
        connector.write.option("compression", "zstd").parquet(str(parquet))
        from_parquet = spark.read.parquet(str(parquet))
        assert scan(from_parquet) == expected

        contenders = {
            "connector": connector,
            "store host": on_store_host,
            **ceilings,
            "local": local,
            "parquet": from_parquet,
        }
        rounds = interleaved(
            {name: lambda frame=frame: scan(frame) for name, frame in contenders.items()},
            lambda t: {
                **{name: ceiling_s(t) / t[name] for name in ("connector", "store host")},
                "local": t["local"] / t["connector"],
                "parquet": t["parquet"] / t["connector"],
            },
            watch={
                # The JVM with its Python workers; this process (the Spark driver's
                # Python side) alone, as the services are its children too.
                "spark": lambda: tree_cpu_seconds(jvm),
                "driver": lambda: sum(os.times()[:2]),
                "segment-store": lambda: tree_cpu_seconds(processes[0].pid),
                "remote-fetch": lambda: tree_cpu_seconds(processes[-1].pid),
            },
        )
        times, ratios = rounds.times, rounds.ratios
        rates = {name: records / statistics.median(t) for name, t in times.items()}
        print(
            f"{records} records in {len(files)} segments ({len(files)} tasks, "
            f"~{chunk_rows} rows a batch), {len(ratios['local'])} rounds; median records/s: "
            + ", ".join(f"{name} {rate:,.0f}" for name, rate in rates.items())
        )
        gigabytes = records * 100 / 1e9  # of values
        for name in contenders:
            print(f"{name}: " + rounds.cpu_line(name, "GB of values", gigabytes))
        ceiling = max(rates[name] for name in ceilings)
        against_ceiling = {
            "connector": "full scan, connector",
            "store host": "full scan on the store's host (its files, short circuit)",
        }
        for name, figure in against_ceiling.items():
            report.ratio_rounds(
                f"{figure} vs prebuilt Arrow batches",
                ratios[name],
                0.85,
                records_per_s=round(rates[name]),
                baseline_records_per_s=round(ceiling),
            )
        report.ratio_rounds(
            "full scan, connector vs the same decode from local files",
            ratios["local"],
            0.8,
            baseline_records_per_s=round(rates["local"]),
        )
        report.ratio_rounds(
            "full scan, connector vs Parquet (zstd) on local disk",
            ratios["parquet"],
            None,
            baseline_records_per_s=round(rates["parquet"]),
        )
        spark.stop()
    report.finish()


if __name__ == "__main__":
    main()
