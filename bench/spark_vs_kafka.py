"""Spark: `format("remotelog")` against Spark's own `format("kafka")` on the same records.

One Apache Kafka broker (KRaft, the pinned version) with the remotelog plugin, the
segment store (filesystem, on this host), the metadata manager on the broker and
the remote fetch service (by the store's short circuit). Two topics of PARTITIONS
partitions get the same RECORDS records (100-byte incompressible values, lz4
batches from one producer): `local` with remote storage off, `tiered` with remote
storage on and a one-second local retention, read once the broker has tiered and
deleted all but the active segments. Spark runs `local[2]` in this process, with
spark-sql-kafka-0-10 from `make setup` on spark.jars, and each contender runs the
query `count(*)`, `sum(length(value))`, `max(offset)`:
- kafka-local: `format("kafka")` over `local`, from the broker's disk;
- kafka-remote: `format("kafka")` over `tiered`: the broker serves the history
  from remotelog through the plugin;
- remotelog: `format("remotelog")` over `tiered`, the history straight from the
  remote tier, the active segments from the broker (`kafka.bootstrap.servers`).
- remotelog-history (reported only): the same without `kafka.bootstrap.servers`,
  so only the records in the remote tier (all but the active segments): what the
  tail read from the broker adds to remotelog's time;
- ceiling (reported only): a Python data source yielding prebuilt Arrow batches
  in as many tasks as the remotelog source plans, by bench/spark.py's rule (the
  faster of Spark's Arrow batch size and the connector's): what any Python source
  can reach on this machine, the bound on the ratios above.
Rounds are interleaved (common.interleaved); each ratio is the median of per-round
ratios (the kafka contender's time over remotelog's: above 1, remotelog is
faster), printed with its spread; CPU seconds per GB of values beside them for the
broker, the services and Spark's JVM.
Run: make setup && .venv/bin/python bench/spark_vs_kafka.py [records, default 5000000]
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import spark as spark_bench
from common import (
    Report,
    RoundPlan,
    interleaved,
    process_cpu_seconds,
    serve_fetch,
    tree_cpu_seconds,
)
from kafka_plugin import plugin_broker, serve_plugin_services, wait_local_deleted
from pyspark import cloudpickle
from pyspark.sql import DataFrame

from remotelog.dev.broker import free_port
from remotelog.dev.kafka_broker import (
    KafkaBroker,
)
from remotelog.dev.spark_session import kafka_source_jars, local_session
from remotelog.process.memory import keep_freed_memory

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 4
VALUE_BYTES = 100
SEGMENT_BYTES = 32 * 1024 * 1024
QUERY = ("count(*) as n", "sum(length(value)) as bytes", "max(offset) as last")
# The connector's rows a batch: about those of a fetched 8 MiB chunk of these records.
CHUNK_ROWS = 75_000
# Each read takes seconds: fewer rounds than the default plan, and one warm-up (the
# JIT of the broker and of Spark's Kafka consumers, the workers' imports).
PLAN = RoundPlan(warmup_rounds=1, min_rounds=5, max_rounds=9)


def create_topic(
    broker: KafkaBroker,
    topic: str,
    tiered: bool,
    partitions: int = PARTITIONS,
    segment_bytes: int = SEGMENT_BYTES,
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"segment.bytes": str(segment_bytes), "retention.ms": "-1"}
    if tiered:
        config |= {"remote.storage.enable": "true", "local.retention.ms": "1000"}
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(60)


def fill(
    broker: KafkaBroker, topics: list[str], records: int, partitions: int = PARTITIONS
) -> None:
    """The same `records` records, round robin over the partitions, to each topic."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "compression.type": "lz4",
            "linger.ms": 20,
            "batch.size": 1 << 20,
        }
    )
    pool = os.urandom(VALUE_BYTES * 1024)
    for number in range(records):
        start = (number * 37) % 1023 * VALUE_BYTES
        value = pool[start : start + VALUE_BYTES]
        for topic in topics:
            while True:
                try:
                    producer.produce(topic, value, partition=number % partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError("records left unsent")


def scan(frame: DataFrame) -> tuple[int, int, int]:
    row = frame.selectExpr(*QUERY).collect()[0]
    return row.n, row.bytes, row.last


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 5_000_000
    keep_freed_memory()
    # Spark's Kafka source from Maven Central, as `make setup` fetches it (once).
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "spark-kafka-jars"], check=True
    )
    jars = kafka_source_jars()
    with spark_stack("remotelog-bench-spark-vs-kafka-") as stack:
        broker = stack.broker
        create_topic(broker, "local", tiered=False)
        create_topic(broker, "tiered", tiered=True)
        began = time.perf_counter()
        fill(broker, ["local", "tiered"], records)
        filled = time.perf_counter() - began
        wait_local_deleted(broker, "tiered", PARTITIONS, timeout_s=600)
        print(
            f"{records} records produced to both topics in {filled:.1f} s, tiered after "
            f"{time.perf_counter() - began:.1f} s",
            flush=True,
        )
        run(broker, stack.processes, stack.fetch_port, stack.metadata_port, records, jars)


@dataclasses.dataclass
class SparkStack:
    broker: KafkaBroker
    processes: list[subprocess.Popen[str]]  # the segment store, metadata manager, fetch
    fetch_port: int
    metadata_port: int

    def remotelog_options(self) -> dict[str, str]:
        return {
            "remotelog.fetch.address": f"127.0.0.1:{self.fetch_port}",
            "remotelog.metadata.address": f"127.0.0.1:{self.metadata_port}",
        }


@contextlib.contextmanager
def spark_stack(prefix: str) -> Iterator[SparkStack]:
    """One broker with the plugin, its segment store (on this host, with its short
    circuit) and metadata manager, and a remote fetch service, in a new directory that
    is removed after, or kept and named when the block fails."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    processes: list[subprocess.Popen[str]] = []
    broker: KafkaBroker | None = None
    try:
        store_port, metadata_port = free_port(), free_port()
        broker = plugin_broker(work / "kafka", store_port, metadata_port, heap="1g")
        processes += serve_plugin_services(
            work,
            broker.bootstrap_servers,
            store_port,
            metadata_port,
            **{"short.circuit.socket.path": str(work / "store.sock")},
        )
        addresses = {
            "segment.store.address": f"127.0.0.1:{store_port}",
            "metadata.manager.address": f"127.0.0.1:{metadata_port}",
        }
        _, fetch_port = serve_fetch(work, addresses, processes)
        yield SparkStack(broker, processes, fetch_port, metadata_port)
    except BaseException:
        print(f"kept {work} (the broker's log)", file=sys.stderr)
        raise
    else:
        shutil.rmtree(work, ignore_errors=True)
    finally:
        for process in processes:
            process.terminate()
        if broker is not None:
            broker.stop()


def run(
    broker: KafkaBroker,
    processes: list[subprocess.Popen[str]],
    fetch_port: int,
    metadata_port: int,
    records: int,
    jars: list[Path],
) -> None:
    report = Report("spark_vs_kafka")
    spark = local_session(
        "remotelog-bench-vs-kafka",
        {"spark.driver.memory": "2g", "spark.ui.showConsoleProgress": "false"},
        jars=jars,
    )

    def kafka(topic: str) -> DataFrame:
        return (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("subscribe", topic)
            .load()
        )

    def remotelog(**options: str) -> DataFrame:
        reader = (
            spark.read.format("remotelog")
            .option("remotelog.fetch.address", f"127.0.0.1:{fetch_port}")
            .option("remotelog.metadata.address", f"127.0.0.1:{metadata_port}")
            .option("subscribe", "tiered")
        )
        return reader.options(**options).load()

    contenders = {
        "kafka-local": kafka("local"),
        "kafka-remote": kafka("tiered"),
        "remotelog": remotelog(**{"kafka.bootstrap.servers": broker.bootstrap_servers}),
    }
    expected = (records, records * VALUE_BYTES)
    for name, frame in contenders.items():
        found = scan(frame)
        if found[:2] != expected:
            raise RuntimeError(f"{name}: {found[:2]} != {expected}")
    contenders["remotelog-history"] = remotelog()
    # Spark's workers cannot import bench/: the prebuilt source travels by value.
    cloudpickle.register_pickle_by_value(spark_bench)
    spark.dataSource.register(spark_bench.PrebuiltSource)
    tasks = contenders["remotelog"].rdd.getNumPartitions()
    per_task = [records // tasks + (1 if i < records % tasks else 0) for i in range(tasks)]
    ceilings = spark_bench.ceiling_frames(spark, per_task, CHUNK_ROWS)
    contenders.update(ceilings)
    assert broker.pid is not None
    jvm = spark.sparkContext._gateway.proc.pid
    broker_pid = broker.pid
    rounds = interleaved(
        {name: lambda frame=frame: scan(frame) for name, frame in contenders.items()},
        lambda t: {
            "local": t["kafka-local"] / t["remotelog"],
            "remote": t["kafka-remote"] / t["remotelog"],
            "ceiling-remote": t["kafka-remote"] / spark_bench.ceiling_s(t),
            "vs-ceiling": spark_bench.ceiling_s(t) / t["remotelog"],
            "history-share": t["remotelog-history"] / t["remotelog"],
        },
        watch={
            "broker": lambda: process_cpu_seconds(broker_pid),
            "segment-store": lambda: process_cpu_seconds(processes[0].pid),
            "metadata-manager": lambda: process_cpu_seconds(processes[1].pid),
            "remote-fetch": lambda: process_cpu_seconds(processes[2].pid),
            "spark": lambda: tree_cpu_seconds(jvm),
        },
        plan=PLAN,
    )
    rates = {name: records / statistics.median(t) for name, t in rounds.times.items()}
    print(
        f"{records} records, {PARTITIONS} partitions, {len(rounds.ratios['local'])} rounds; "
        "median records/s: " + ", ".join(f"{name} {rate:,.0f}" for name, rate in rates.items())
    )
    gigabytes = records * VALUE_BYTES / 1e9
    for name in contenders:
        print(f"{name}: " + rounds.cpu_line(name, "GB of values", gigabytes))
    broker_cpu = {
        name: statistics.median(rounds.cpu[name]["broker"]) / gigabytes for name in contenders
    }
    for where, target in (("local", 1.0), ("remote", 2.0)):
        report.ratio_rounds(
            f"spark_remotelog_vs_kafka_source_{where}",
            rounds.ratios[where],
            target,
            records_per_s=round(rates["remotelog"]),
            baseline_records_per_s=round(rates[f"kafka-{where}"]),
        )
    report.ratio_rounds(
        "ceiling: prebuilt Arrow batches vs the kafka source over the remote tier",
        rounds.ratios["ceiling-remote"],
        None,
        baseline_records_per_s=round(max(rates[name] for name in ceilings)),
    )
    report.ratio_rounds(
        "remotelog vs prebuilt Arrow batches in as many tasks", rounds.ratios["vs-ceiling"], None
    )
    in_history = scan(contenders["remotelog-history"])[0]
    report.ratio_rounds(
        f"remotelog, history only ({in_history} records) vs history and tail",
        rounds.ratios["history-share"],
        None,
    )
    report.info(
        "broker CPU s per GB of values",
        **{name: round(seconds, 2) for name, seconds in broker_cpu.items()},
    )
    print(
        "broker CPU s per GB of values: "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in broker_cpu.items())
    )
    spark.stop()
    report.finish()


if __name__ == "__main__":
    main()
