"""The first query of a Spark session: `format("remotelog")` against `format("kafka")`.

What a notebook user meets: a new SparkSession, then `count()` over a small topic.
One Apache Kafka broker with the remotelog plugin, the segment store, the metadata
manager and the remote fetch service, as bench/spark_vs_kafka.py has them; one topic
of PARTITIONS partitions and RECORDS records (100-byte values, lz4), tiered and
deleted locally but for the active segments. Each run is a fresh Python process
that starts a SparkSession (`local[2]`, spark-sql-kafka-0-10 on spark.jars for both
formats, so the two sessions are alike) and times only its first
`spark.read.format(...).load().count()`: the session's start is not counted for
either. Runs of the two formats are interleaved (common.interleaved); the ratio is
the median of per-round ratios, Spark's Kafka source's time over remotelog's.
Reported only, a third contender: the floor of Spark's Python data source API, a
source that plans PARTITIONS tasks yielding one prebuilt Arrow batch of offsets
each, with no import, channel or read of its own: what any Python source pays for
Spark's Python processes (one to create the source, one to plan, one per core for
the tasks).
Run: make setup && .venv/bin/python bench/spark_first_query.py [records, default 120000]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import Report, RoundPlan, Timed, interleaved
from kafka_plugin import wait_local_deleted
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import LongType, StructField, StructType
from spark_vs_kafka import create_topic, fill, spark_stack

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "tiered"
PARTITIONS = 2
FLOOR = "python-floor"
# Fresh processes, each a JVM start: the spread of a round is wide, and its cost high.
PLAN = RoundPlan(warmup_rounds=1, min_rounds=5, max_rounds=9, tolerance=0.1)


class FloorSource(DataSource):
    """FLOOR's source. Defined in the child's __main__, so Spark's workers receive it by
    value (cloudpickle), as a notebook's own source would be."""

    @classmethod
    def name(cls) -> str:
        return FLOOR

    def schema(self) -> StructType:
        return StructType([StructField("offset", LongType())])

    def reader(self, schema: StructType) -> DataSourceReader:
        return FloorReader(int(self.options["records"]))


class FloorReader(DataSourceReader):
    def __init__(self, records: int) -> None:
        self.records = records

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        rows = self.records // PARTITIONS
        start = partition.value * rows
        yield pa.RecordBatch.from_arrays([pa.array(range(start, start + rows))], ["offset"])


def first_count(spark_format: str, options: dict[str, str]) -> dict[str, float]:
    """In this (fresh) process: a SparkSession, then the time of its first count()."""
    from remotelog.dev.spark_session import kafka_source_jars, local_session

    began = time.perf_counter()
    spark = local_session(
        "remotelog-bench-first-query",
        {"spark.ui.showConsoleProgress": "false"},
        jars=kafka_source_jars(),
    )
    spark.dataSource.register(FloorSource)
    started = time.perf_counter()
    rows = spark.read.format(spark_format).options(**options).load().count()
    counted = time.perf_counter()
    spark.stop()
    return {"rows": rows, "session_s": started - began, "query_s": counted - started}


def run_fresh(spark_format: str, options: dict[str, str], records: int) -> Timed:
    """first_count in a new process: its query's seconds."""
    child = subprocess.run(
        [sys.executable, __file__, "--first", spark_format, json.dumps(options)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent,
    )
    if child.returncode != 0:
        raise RuntimeError(f"{spark_format}: {child.stderr[-4000:]}")
    found = json.loads(child.stdout.strip().splitlines()[-1])
    if found["rows"] != records:
        raise RuntimeError(f"{spark_format} counted {found['rows']} rows, not {records}")
    return Timed(found["query_s"], {"session_s": found["session_s"]})


def main() -> None:
    if sys.argv[1:2] == ["--first"]:
        print(json.dumps(first_count(sys.argv[2], json.loads(sys.argv[3]))), flush=True)
        return
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 120_000
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "spark-kafka-jars"], check=True
    )
    with spark_stack("remotelog-bench-first-query-") as stack:
        broker = stack.broker
        create_topic(broker, TOPIC, tiered=True, partitions=PARTITIONS, segment_bytes=1 << 20)
        fill(broker, [TOPIC], records, partitions=PARTITIONS)
        wait_local_deleted(broker, TOPIC, PARTITIONS, timeout_s=600)
        bootstrap = {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": TOPIC}
        run(
            records,
            {
                "kafka": bootstrap,
                "remotelog": bootstrap | stack.remotelog_options(),
                FLOOR: {"records": str(records)},
            },
        )


def run(records: int, options: dict[str, dict[str, str]]) -> None:
    report = Report("spark_first_query")
    rounds = interleaved(
        {
            name: lambda name=name, given=given: run_fresh(name, given, records)
            for name, given in options.items()
        },
        lambda t: {
            "first": t["kafka"] / t["remotelog"],
            "floor": t["kafka"] / t[FLOOR],
            "vs-floor": t[FLOOR] / t["remotelog"],
        },
        plan=PLAN,
    )
    medians = {name: statistics.median(times) for name, times in rounds.times.items()}
    sessions = {name: statistics.median(cpu["session_s"]) for name, cpu in rounds.cpu.items()}
    print(
        f"{records} records, {PARTITIONS} partitions, {len(rounds.ratios['first'])} rounds; "
        "median first count(): "
        + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in medians.items())
        + "; median session start: "
        + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in sessions.items())
    )
    report.ratio_rounds(
        "spark_first_query_vs_kafka",
        rounds.ratios["first"],
        1.0,
        remotelog_s=round(medians["remotelog"], 3),
        kafka_s=round(medians["kafka"], 3),
    )
    report.ratio_rounds(
        "floor: a Python source with nothing of its own vs the kafka source",
        rounds.ratios["floor"],
        None,
        floor_s=round(medians[FLOOR], 3),
    )
    report.ratio_rounds("remotelog vs that floor", rounds.ratios["vs-floor"], None)
    report.finish()


if __name__ == "__main__":
    main()
