"""Cold reads of tiered history from S3 over object storage's link, through Kafka.

moto's S3 server runs behind the link (tests/support/s3_server.py; its defaults, a
region's S3 as a broker sees it: 50 ms to the first byte, 50 MB/s for all requests
together; BENCH_S3_LINK names other settings). Two single-node KRaft brokers (the
pinned Kafka) tier through the remotelog plugin, each to its own S3 segment store
(presigned GET URLs on) and metadata manager; the plugin reads segment logs from S3
itself by those URLs:
- read-ahead: the plugin's defaults (`fetch.read.ahead.chunks` 8 chunks of 1 MiB);
- no read-ahead: `fetch.read.ahead.chunks=0`, one open-ended ranged GET per Kafka
  fetch, as before read-ahead.

Each round, on each broker in turn (the order rotates): a new topic of one partition
with 64 MiB segments is filled with MIB of incompressible 1 KiB records and tiered
until only its active segment is local; the link is lifted for this, since only the
read is measured. Then, over the link, a plain consumer (librdkafka's defaults, one
1 MiB partition fetch a request) reads the partition from offset 0 to its end through
the broker, which serves all but the active segment from S3: a topic not read before,
so nothing of it is in the broker's caches. Then the topic is deleted.

Then, on the read-ahead contender's topic, before it is deleted, over the link: Spark
(`local[2]`) reads the tiered range with `format("remotelog")` and adds up its values,
its tasks reading S3 by the URLs its remote fetch service locates, and a raw contender
issues the same ranged GETs with the same parallelism and only counts their bytes
(bench/cold_spark.py); reported beside them, Spark with `remotelog.fetchUrls=false`,
every byte through the fetch service (which reads S3 by URL itself), and the CPU the
store, the metadata manager and the fetch service spend per GiB each way. The order
alternates by round. Spark's Python workers are started by a small query first.

BENCH_BACKEND=gcs or azure puts GCS's emulator or Azurite behind the same link
(s3_server.py --upstream) instead of moto, the stores on them signing V4 URLs with a
service account's key or SAS URLs with Azurite's account key, and leaves Spark out;
the line <backend>_cold_read_vs_link is reported for every backend. The emulators
have no cloud's latency or throttling of their own: the link stands in for both.

BENCH_READ_PATH=stream reads through the segment store's FetchLogSegment stream instead
(the plugin's `fetch.urls.enabled=false`): read-ahead is then the store's own
(`fetch.read.ahead.chunks` 8 chunks of 1 MiB, against 0, one GET to the segment's end
per fetch), and the lines are named cold_read_kafka_stream_*.

Figures, medians of per-round ratios with their spread:
- cold_read_kafka_readahead: the read's time without read-ahead over its time with it;
- cold_read_kafka_vs_link: bytes/s with read-ahead over the link's bandwidth cap;
- cold_read_spark_vs_raw: the raw GETs' time over Spark's (not with BENCH_READ_PATH=stream);
and reported: S3 requests and bytes sent over the link per GiB read, and the p99 of
Kafka's remote read time of a fetch (RemoteLogReaderFetchRateAndTimeMs, read after
each read; Kafka's histogram favours the last minutes).
Run: .venv/bin/python bench/cold_reads.py [rounds, default 3]  (BENCH_MIB, default 1024)
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cold_spark import SparkReads
from common import (
    Report,
    create_bucket,
    kept_on_failure,
    process_cpu_seconds,
    s3_server_command,
    serve,
    serve_fetch,
    serve_metadata_manager,
    start,
)
from kafka_plugin import admin, plugin_broker, produce_incompressible, wait_local_deleted
from object_stores import azure_connection_string, azurite_host, new_gcs_bucket, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.kafka_cluster import KafkaNode
from support.services import service_account_key

from remotelog.dev.broker import free_port

MIB = int(os.environ.get("BENCH_MIB", "1024"))
BACKEND = os.environ.get("BENCH_BACKEND", "s3")
STREAM = os.environ.get("BENCH_READ_PATH", "url") == "stream"
LINE = "cold_read_kafka_stream" if STREAM else "cold_read_kafka"
SEGMENT_BYTES = 64 * 1024 * 1024
GIB = 1024**3
# Kafka's time of each remote read a fetch makes (the broker's FetchConsumer request
# times would count the metadata manager's long polls of its topic too).
LINK_SETTINGS = ("first_byte_ms", "bandwidth_mb_s", "slow_down_fraction", "cut_fraction", "seed")
REMOTE_READS = "kafka.log.remote:type=RemoteLogManager,name=RemoteLogReaderFetchRateAndTimeMs"


class S3Link:
    """The S3 server's link, lifted and put back by its control endpoint."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.settings = {k: v for k, v in (self.call("GET") or {}).items() if k in LINK_SETTINGS}
        if not self.settings:
            raise SystemExit("the S3 server runs without a link")

    def call(self, method: str, settings: dict[str, Any] | None = None) -> dict[str, Any] | None:
        data = json.dumps(settings).encode() if settings is not None else None
        request = urllib.request.Request(f"{self.endpoint}/__link__", data=data, method=method)
        with urllib.request.urlopen(request, timeout=10) as answer:
            found: dict[str, Any] | None = json.loads(answer.read())
        return found

    def lift(self) -> None:
        self.call("DELETE")

    def put_back(self) -> None:
        """The link as the server started with it, its counts from zero."""
        self.call("POST", self.settings)

    def counts(self) -> dict[str, Any]:
        return self.call("GET") or {}


@dataclass
class Contender:
    name: str
    broker: KafkaNode
    services: list[subprocess.Popen[str]] = field(default_factory=list)
    read_s: list[float] = field(default_factory=list)
    requests_per_gib: list[float] = field(default_factory=list)
    link_bytes_per_gib: list[float] = field(default_factory=list)
    remote_read_p99_ms: list[float] = field(default_factory=list)
    # A remote fetch service beside the broker, for Spark (the read-ahead contender's).
    fetch_address: str = ""
    metadata_address: str = ""


@dataclass
class Bucket:
    """The backend's server behind the link: where the stores reach it, and how a
    bucket of its is made."""

    endpoint: str  # the link's
    upstream: str  # the emulator's own (GCS: its URL; Azure: its connection string)
    gcs_key: str = field(default_factory=service_account_key)

    def create(self, name: str) -> None:
        if BACKEND == "s3":
            create_bucket(self.endpoint, name)
        elif BACKEND == "gcs":
            new_gcs_bucket(self.upstream, name)
        else:
            from azure.storage.blob import BlobServiceClient

            BlobServiceClient.from_connection_string(self.upstream).create_container(name)

    def store_settings(self, name: str) -> dict[str, str]:
        """The store's settings for bucket `name`, over the link, signing fetch URLs."""
        urls = {"storage.backend": BACKEND, "storage.s3.fetch.url.expiry.ms": "600000"}
        if BACKEND == "gcs":
            return urls | {
                "storage.gcs.bucket.name": name,
                "storage.gcs.endpoint.url": self.endpoint,
                "storage.gcs.credentials.json": self.gcs_key,
            }
        if BACKEND == "azure":
            return urls | {
                "storage.azure.container.name": name,
                "storage.azure.connection.string": azure_connection_string(self.endpoint),
            }
        return urls | {
            "storage.s3.bucket.name": name,
            "storage.s3.endpoint.url": self.endpoint,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": "test",
            "storage.aws.secret.access.key": "test",
        }


def contender(work: Path, name: str, bucket: Bucket, read_ahead_chunks: int | None) -> Contender:
    """A broker with the plugin, its store (on bucket `name`) and metadata manager."""
    directory = work / name
    directory.mkdir()
    store_port, metadata_port = free_port(), free_port()
    # The broker PUTs what it tiers to the bucket itself, by the store's upload URLs.
    properties = {"log.segment.bytes": str(SEGMENT_BYTES), "rsm.config.copy.method": "url"}
    store_settings = {}
    if STREAM:
        properties["rsm.config.fetch.urls.enabled"] = "false"
        if read_ahead_chunks is not None:
            store_settings["fetch.read.ahead.chunks"] = str(read_ahead_chunks)
    elif read_ahead_chunks is not None:
        properties["rsm.config.fetch.read.ahead.chunks"] = str(read_ahead_chunks)
    broker = plugin_broker(directory, store_port, metadata_port, properties, jmx_port=free_port())
    store, _ = serve(
        "segment-store",
        directory / "store.properties",
        {
            "listen.address": f"127.0.0.1:{store_port}",
            **bucket.store_settings(name),
            **store_settings,
        },
    )
    metadata, _ = serve_metadata_manager(
        directory, broker.bootstrap_servers, f"127.0.0.1:{metadata_port}"
    )
    addresses = {
        "segment.store.address": f"127.0.0.1:{store_port}",
        "metadata.manager.address": f"127.0.0.1:{metadata_port}",
    }
    services = [store, metadata]
    _, fetch_port = serve_fetch(directory, addresses, services, way="store")
    return Contender(
        name,
        broker,
        services,
        fetch_address=f"127.0.0.1:{fetch_port}",
        metadata_address=addresses["metadata.manager.address"],
    )


def tiered_topic(contender: Contender, topic: str) -> int:
    """A one-partition topic filled with MIB MiB and tiered; the value bytes in it."""
    from confluent_kafka.admin import NewTopic

    config = {
        "segment.bytes": str(SEGMENT_BYTES),
        "retention.ms": "-1",
        "remote.storage.enable": "true",
        "local.retention.ms": "1000",
    }
    client = admin(contender.broker)
    client.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
    records = produce_incompressible(contender.broker.bootstrap_servers, topic, 1, MIB)
    wait_local_deleted(contender.broker, topic, partitions=1, timeout_s=900)
    return records * 1024


def read_cold(contender: Contender, topic: str, values: int, partitions: int = 1) -> float:
    """Seconds a plain consumer takes to read the topic's partitions from offset 0 to
    their ends, fetched together."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": contender.broker.bootstrap_servers,
            "group.id": f"bench-{topic}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, n, 0) for n in range(partitions)])
    seen, ended = 0, set()
    began = time.perf_counter()
    while len(ended) < partitions:
        for message in consumer.consume(10_000, 1.0):
            error = message.error()
            if error is None:
                seen += len(message.value() or b"")
            elif error.code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition())
            else:
                raise RuntimeError(str(error))
    seconds = time.perf_counter() - began
    consumer.close()
    if seen != values:
        raise RuntimeError(f"{contender.name}: read {seen} value bytes of {values}")
    return seconds


@dataclass
class SparkRounds:
    """The Spark line's contenders over the read-ahead contender's topics."""

    reads: SparkReads
    services: list[subprocess.Popen[str]]  # the store, metadata manager and fetch service
    spark_s: list[float] = field(default_factory=list)
    raw_s: list[float] = field(default_factory=list)
    # Reported: Spark with every byte through the fetch service (remotelog.fetchUrls=false),
    # and the services' CPU per GiB read each way.
    service_s: list[float] = field(default_factory=list)
    cpu_per_gib: dict[str, list[float]] = field(
        default_factory=lambda: {"spark": [], "service": []}
    )
    requests_per_gib: list[float] = field(default_factory=list)
    value_bytes: int = 0
    raw_bytes: int = 0

    def run(self, topic: str, link: S3Link, number: int) -> None:
        """Spark's read and the raw GETs of the topic's tiered range, over the link, the
        order alternating by round; each reads every byte from S3 again."""
        if number == 0:
            self.reads.warm_up(topic)
        order = ("spark", "raw", "service") if number % 2 == 0 else ("service", "raw", "spark")
        for which in order:
            link.put_back()
            cpu = sum(process_cpu_seconds(p.pid) for p in self.services)
            if which == "raw":
                seconds, raw_bytes, summary = self.reads.raw_read(topic)
                self.raw_s.append(seconds)
                continue
            urls = "true" if which == "spark" else "false"
            seconds, rows, value_bytes = self.reads.spark_read(
                topic, **{"remotelog.fetchUrls": urls}
            )
            cpu = sum(process_cpu_seconds(p.pid) for p in self.services) - cpu
            (self.spark_s if which == "spark" else self.service_s).append(seconds)
            self.cpu_per_gib[which].append(cpu / (value_bytes / GIB))
            if which == "spark":
                requests = link.counts()["requests"]
        tiered = summary.latest_tiered_offset + 1 - summary.earliest_offset
        if rows != tiered or value_bytes != rows * 1024 or raw_bytes < summary.remote_bytes:
            raise RuntimeError(
                f"spark read {rows} rows ({value_bytes} value bytes) of {tiered}; "
                f"the GETs {raw_bytes} bytes of {summary.remote_bytes}"
            )
        self.value_bytes, self.raw_bytes = value_bytes, raw_bytes
        self.requests_per_gib.append(requests / (summary.remote_bytes / GIB))
        print(
            f"  round {number} spark: {value_bytes / 1e6 / self.spark_s[-1]:.1f} MB/s of values, "
            f"raw GETs {raw_bytes / 1e6 / self.raw_s[-1]:.1f} MB/s, {requests} requests; "
            f"through the fetch service {value_bytes / 1e6 / self.service_s[-1]:.1f} MB/s; "
            f"services' CPU per GiB {self.cpu_per_gib['spark'][-1]:.2f} s by URL, "
            f"{self.cpu_per_gib['service'][-1]:.2f} s through the service",
            flush=True,
        )


def run_round(
    contender: Contender, link: S3Link, number: int, spark: SparkRounds | None = None
) -> None:
    topic = f"cold-{contender.name}-{number}"
    link.lift()
    values = tiered_topic(contender, topic)
    link.put_back()
    contender.read_s.append(read_cold(contender, topic, values))
    counts = link.counts()
    contender.requests_per_gib.append(counts["requests"] / (values / GIB))
    contender.link_bytes_per_gib.append(counts["bytes_down"] / (values / GIB))
    [p99] = contender.broker.jmx(REMOTE_READS, attribute="99thPercentile").values()
    contender.remote_read_p99_ms.append(p99)
    print(
        f"  round {number} {contender.name}: {values / 1e6 / contender.read_s[-1]:.1f} MB/s, "
        f"{counts['requests']} requests, {counts['bytes_down'] / values:.2f} bytes sent a byte "
        f"read, remote read p99 {p99:.0f} ms",
        flush=True,
    )
    if spark is not None:
        spark.run(topic, link, number)
    link.lift()
    client = admin(contender.broker)
    client.delete_topics([topic])[topic].result(60)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with (
        kept_on_failure("bench-cold-reads-", "the brokers' logs") as work,
        contextlib.ExitStack() as running,
    ):
        command = s3_server_command(link_by_default=True)
        upstream = ""
        if BACKEND != "s3":
            emulator, upstream = start_server(BACKEND)
            running.callback(emulator.terminate)
            http = azurite_host(upstream) if BACKEND == "azure" else upstream
            command = [*command, "--upstream", http]
        moto, line = start(command, "PORT")
        running.callback(moto.terminate)
        endpoint = f"http://127.0.0.1:{line.split()[1]}"
        bucket = Bucket(endpoint, upstream)
        link = S3Link(endpoint)
        path = "FetchLogSegment" if STREAM else "URLs"
        print(f"{BACKEND}, link: {link.settings}; {MIB} MiB a round, read by {path}", flush=True)
        contenders = []
        for name, chunks in (("read-ahead", None), ("no-read-ahead", 0)):
            bucket.create(name)
            contenders.append(contender(work, name, bucket, chunks))
            running.callback(stop, contenders[-1])
        spark = None
        if not STREAM and BACKEND == "s3":
            reads = SparkReads(contenders[0].fetch_address, contenders[0].metadata_address)
            running.callback(reads.stop)
            spark = SparkRounds(reads, contenders[0].services)
        for number in range(rounds):
            order = contenders if number % 2 == 0 else contenders[::-1]
            for each in order:
                run_round(each, link, number, spark if each is contenders[0] else None)
        report(contenders, link, spark)


def stop(contender: Contender) -> None:
    for process in contender.services:
        process.terminate()
    contender.broker.stop()


def report(contenders: list[Contender], link: S3Link, spark: SparkRounds | None) -> None:
    ahead, plain = contenders
    values = MIB * 1024 * 1024
    out = Report("cold_reads")
    out.ratio_rounds(
        f"{LINE}_readahead",
        [p / a for a, p in zip(ahead.read_s, plain.read_s, strict=True)],
        2,
    )
    cap = float(link.settings["bandwidth_mb_s"]) * 1e6
    out.ratio_rounds(f"{LINE}_vs_link", [values / s / cap for s in ahead.read_s], 0.7)
    out.ratio_rounds(f"{BACKEND}_cold_read_vs_link", [values / s / cap for s in ahead.read_s], 0.7)
    if spark is not None:
        out.ratio_rounds(
            "cold_read_spark_vs_raw",
            [r / s for s, r in zip(spark.spark_s, spark.raw_s, strict=True)],
            0.8,
        )
        out.info(
            "cold_read_spark",
            value_mb_s=round(spark.value_bytes / 1e6 / statistics.median(spark.spark_s), 1),
            raw_mb_s=round(spark.raw_bytes / 1e6 / statistics.median(spark.raw_s), 1),
            requests_per_gib=round(statistics.median(spark.requests_per_gib)),
            through_service_value_mb_s=round(
                spark.value_bytes / 1e6 / statistics.median(spark.service_s), 1
            ),
            services_cpu_s_per_gib_by_url=round(statistics.median(spark.cpu_per_gib["spark"]), 2),
            services_cpu_s_per_gib_through_service=round(
                statistics.median(spark.cpu_per_gib["service"]), 2
            ),
        )
    for each in contenders:
        out.info(
            f"{LINE}_{each.name.replace('-', '_')}",
            mb_s=round(values / 1e6 / statistics.median(each.read_s), 1),
            requests_per_gib=round(statistics.median(each.requests_per_gib)),
            link_gib_per_gib=round(statistics.median(each.link_bytes_per_gib) / GIB, 2),
            remote_read_p99_ms=round(statistics.median(each.remote_read_p99_ms)),
        )
    out.finish()
    for each in contenders:
        print(
            f"  {each.name}: {values / 1e6 / statistics.median(each.read_s):.1f} MB/s "
            f"({min(each.read_s):.1f}-{max(each.read_s):.1f} s), "
            f"{statistics.median(each.requests_per_gib):.0f} S3 requests and "
            f"{statistics.median(each.link_bytes_per_gib) / GIB:.2f} GiB over the link per GiB, "
            f"remote read p99 {statistics.median(each.remote_read_p99_ms):.0f} ms"
        )
    if spark is not None:
        print(
            f"  spark: {spark.value_bytes / 1e6 / statistics.median(spark.spark_s):.1f} MB/s "
            f"of values ({min(spark.spark_s):.1f}-{max(spark.spark_s):.1f} s); its GETs alone "
            f"{spark.raw_bytes / 1e6 / statistics.median(spark.raw_s):.1f} MB/s of the log "
            f"({min(spark.raw_s):.1f}-{max(spark.raw_s):.1f} s); through the fetch service "
            f"{spark.value_bytes / 1e6 / statistics.median(spark.service_s):.1f} MB/s; the "
            f"services' CPU per GiB {statistics.median(spark.cpu_per_gib['spark']):.2f} s by "
            f"URL, {statistics.median(spark.cpu_per_gib['service']):.2f} s through the service"
        )
    print(f"  link: {link.settings}; {MIB} MiB of one partition a round")


if __name__ == "__main__":
    main()
