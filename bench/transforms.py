"""Compressed and encrypted segments against plain ones: what they save and what they cost.

First, without a broker: the stored size over the original of the real broker-written
segments in tests/data/kafka-logs and of an uncompressed topic's text-like records,
chunked (4 MiB), compressed (zstd 3) and encrypted as the store does it.

Then two single-node KRaft brokers (the pinned Kafka) with the plugin, each with its own
S3 segment store (moto, behind object storage's link: 50 ms to the first byte, 50 MB/s,
unless BENCH_S3_LINK names others) and metadata manager: "plain", and "sealed", whose
store compresses and encrypts under a key of a KMS (a second moto, on the loopback,
counting its requests); and "sealed-url", sealed with TLS between the plugin and its
store. Plain and sealed-url copy by URL and read by the URLs their stores sign,
straight from S3, the sealed-url plugin encoding and decoding the chunks itself with
the data keys its store hands out over TLS; sealed copies by stream and reads through
its store (no TLS: the store hands out no data key), which fetches only the chunks a
read needs.

Each round, on each broker in turn (the order alternates): a one-partition topic of
16 MiB segments
1 KiB records with tiering off and the link lifted; then tiering is turned on, timed
until Kafka logged the last rolled segment's copy (transform_tiering_vs_plain: plain's
time over sealed's, target 0.8); then, over the link, a plain consumer reads the
partition from offset 0 through the broker (transform_cold_read_vs_plain: plain's time
over sealed's, target 1.5; the same of sealed-url, transform_url_*). Reported beside
them: the store's and the broker's CPU seconds per GB tiered and per GB read, bytes
sent over the link per byte read, and KMS calls per segment copied and per segment read
(one per copy; reads keep unwrapped keys).
Run: .venv/bin/python bench/transforms.py [rounds, default 3]  (BENCH_MIB)
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cold_reads import S3Link, read_cold
from common import (
    Report,
    create_bucket,
    kept_on_failure,
    process_cpu_seconds,
    s3_server_command,
    serve,
    serve_metadata_manager,
    start,
)
from kafka_plugin import admin, plugin_broker, tier, wait_local_deleted

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.data import KAFKA_LOGS
from support.kafka_cluster import KafkaNode
from support.kms import kms_key
from support.tls import make_certificates, server_tls_settings

from remotelog.dev.broker import free_port
from remotelog.kafka.records import Record, build_batch
from remotelog.transforms.chunks import ChunkCodec, DataKey, SegmentObjectKind, encode_chunks

ROOT = Path(__file__).resolve().parents[1]
MIB = int(os.environ.get("BENCH_MIB", "256"))
SEGMENT_BYTES = 16 * 1024 * 1024
PARTITIONS = 3  # read together: more than one partition's reads can fill the link
CHUNK = 4 * 1024 * 1024
GB = 1e9
SEALED = {"compression.enabled": "true", "chunk.size": str(CHUNK)}


def text_record(number: int) -> bytes:
    """About 1 KiB of the JSON an order service might produce."""
    lines = ",".join(
        f'{{"sku":"SKU-{(number * 7 + i) % 9973:05d}","qty":{(number + i) % 9 + 1},'
        f'"price":{(number * 31 + i * 17) % 50000 / 100:.2f},"note":"deliver to dock {i % 4}"}}'
        for i in range(9)
    )
    return (f'{{"order":{number},"customer":"c-{number % 4099}","lines":[{lines}]}}').encode()


def compression_ratios(report: Report) -> None:
    """Stored bytes over original ones, encoded as the store encodes a segment's log."""
    key = DataKey(os.urandom(32), "local", "bench", b"")
    codec = ChunkCodec(uuid.uuid4(), uuid.uuid4(), SegmentObjectKind.LOG, 3, key)
    logs = sorted(KAFKA_LOGS.glob("*/*.log"))
    texts = b"".join(
        build_batch(
            [Record(n + i, 1_700_000_000_000 + n + i, None, text_record(n + i)) for i in range(100)]
        )
        for n in range(0, 20_000, 100)
    )
    for name, original in (
        ("kafka_logs", b"".join(log.read_bytes() for log in logs)),
        ("text", texts),
    ):
        index, _ = encode_chunks(codec, original, CHUNK)
        ratio = round(index.stored_size / len(original), 3)
        report.info(
            f"transform_compression_{name}",
            stored_over_original=ratio,
            original_bytes=len(original),
        )
        print(f"compression of {name}: {len(original)} bytes stored as {ratio} of them", flush=True)


class Kms:
    """A second moto, for KMS alone, its link without delay or cap: it counts requests."""

    def __init__(self) -> None:
        command = [sys.executable, str(ROOT / "tests" / "support" / "s3_server.py")]
        self.process, line = start(
            [*command, "--link", "--first-byte-ms=0", "--bandwidth-mb-s=0"], "PORT"
        )
        self.endpoint = f"http://127.0.0.1:{line.split()[1]}"
        self.key = kms_key(self.endpoint)

    def requests(self) -> int:
        with urllib.request.urlopen(f"{self.endpoint}/__link__", timeout=10) as answer:
            return int(json.loads(answer.read())["requests"])


@dataclass
class Contender:
    name: str
    broker: KafkaNode
    services: list[subprocess.Popen[str]]
    tier_s: list[float] = field(default_factory=list)
    read_s: list[float] = field(default_factory=list)
    tier_cpu_per_gb: list[float] = field(default_factory=list)
    read_cpu_per_gb: list[float] = field(default_factory=list)
    broker_tier_cpu_per_gb: list[float] = field(default_factory=list)
    broker_read_cpu_per_gb: list[float] = field(default_factory=list)
    link_bytes_per_byte: list[float] = field(default_factory=list)
    kms_per_copy: list[float] = field(default_factory=list)
    kms_per_read: list[float] = field(default_factory=list)

    @property
    def store(self) -> subprocess.Popen[str]:
        return self.services[0]

    def cpu(self) -> tuple[float, float]:
        """CPU seconds of the store and of the broker so far."""
        assert self.broker.pid is not None
        return process_cpu_seconds(self.store.pid), process_cpu_seconds(self.broker.pid)


def per_gb(before: tuple[float, float], after: tuple[float, float], size: int) -> list[float]:
    return [(a - b) / (size / GB) for a, b in zip(after, before, strict=True)]


def contender(
    work: Path, name: str, endpoint: str, kms: Kms | None, tls: bool = False
) -> Contender:
    """A broker and its services; `kms`: the store seals new segments under its key;
    `tls`: the plugin calls the store over TLS, and copies by URL."""
    directory = work / name
    directory.mkdir()
    store_port, metadata_port = free_port(), free_port()
    copies = "url" if kms is None or tls else "stream"
    properties = {"log.segment.bytes": str(SEGMENT_BYTES), "rsm.config.copy.method": copies}
    server_tls = {}
    if tls:
        certificates = make_certificates(directory)
        properties["rsm.config.client.tls.ca.file"] = str(certificates.ca)
        server_tls = {
            k: v for k, v in server_tls_settings(certificates).items() if "client" not in k
        }
    broker = plugin_broker(directory, store_port, metadata_port, properties)
    sealed = {}
    if kms is not None:
        sealed = {
            **SEALED,
            "encryption.key.provider": "aws-kms",
            "encryption.kms.endpoint.url": kms.endpoint,
            "encryption.key.id": kms.key,
        }
    store, _ = serve(
        "segment-store",
        directory / "store.properties",
        {
            "listen.address": f"127.0.0.1:{store_port}",
            "storage.backend": "s3",
            "storage.s3.bucket.name": name,
            "storage.s3.endpoint.url": endpoint,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": "test",
            "storage.aws.secret.access.key": "test",
            **sealed,
            **server_tls,
        },
    )
    metadata, _ = serve_metadata_manager(
        directory, broker.bootstrap_servers, f"127.0.0.1:{metadata_port}"
    )
    return Contender(name, broker, [store, metadata])


def produce_text(bootstrap: str, topic: str, mib: int) -> int:
    """`mib` MiB of text-like records, uncompressed; their value bytes."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    sent = number = 0
    while sent < mib * 1024 * 1024:
        value = text_record(number)
        while True:
            try:
                producer.produce(topic, value, partition=number % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        sent += len(value)
        number += 1
    assert producer.flush(300) == 0
    return sent


def tiered(contender: Contender, topic: str, kms: Kms) -> tuple[int, int]:
    """The topic filled with tiering off, then tiered (kafka_plugin.tier: seconds until
    Kafka logged the last rolled segment's copy, kept); its value bytes and tiered
    segments."""
    from confluent_kafka.admin import NewTopic

    broker = contender.broker
    client = admin(broker)
    config = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
    client.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(60)
    values = produce_text(broker.bootstrap_servers, topic, MIB)
    logs = [sorted((broker.data_dir / f"{topic}-{n}").glob("*.log")) for n in range(PARTITIONS)]
    rolled = sum(len(files) - 1 for files in logs)
    if not rolled:
        raise SystemExit(f"BENCH_MIB={MIB} rolls no {SEGMENT_BYTES >> 20} MiB segment")
    log_bytes = sum(log.stat().st_size for files in logs for log in files)
    cpu, kms_before = contender.cpu(), kms.requests()
    contender.tier_s.append(tier(contender, topic, rolled))  # type: ignore[arg-type]
    store_cpu, broker_cpu = per_gb(cpu, contender.cpu(), log_bytes)
    contender.tier_cpu_per_gb.append(store_cpu)
    contender.broker_tier_cpu_per_gb.append(broker_cpu)
    contender.kms_per_copy.append((kms.requests() - kms_before) / rolled)
    wait_local_deleted(broker, topic, partitions=PARTITIONS, timeout_s=900)
    return values, rolled


def run_round(contender: Contender, link: S3Link, kms: Kms, number: int) -> None:
    topic = f"transforms-{contender.name}-{number}"
    link.lift()
    values, segments = tiered(contender, topic, kms)
    link.put_back()
    cpu, kms_before = contender.cpu(), kms.requests()
    contender.read_s.append(read_cold(contender, topic, values, PARTITIONS))
    counts = link.counts()
    store_cpu, broker_cpu = per_gb(cpu, contender.cpu(), values)
    contender.read_cpu_per_gb.append(store_cpu)
    contender.broker_read_cpu_per_gb.append(broker_cpu)
    contender.link_bytes_per_byte.append(counts["bytes_down"] / values)
    contender.kms_per_read.append((kms.requests() - kms_before) / segments)
    link.lift()
    print(
        f"  round {number} {contender.name}: tiered in {contender.tier_s[-1]:.1f} s, read "
        f"{values / 1e6 / contender.read_s[-1]:.1f} MB/s, {contender.link_bytes_per_byte[-1]:.2f} "
        f"bytes over the link a byte read; store CPU {contender.tier_cpu_per_gb[-1]:.2f} s/GB "
        f"tiered, {contender.read_cpu_per_gb[-1]:.2f} s/GB read; broker CPU "
        f"{contender.broker_tier_cpu_per_gb[-1]:.2f} s/GB tiered, "
        f"{contender.broker_read_cpu_per_gb[-1]:.2f} s/GB read",
        flush=True,
    )
    client = admin(contender.broker)  # kept: a client collected mid-call ends it
    client.delete_topics([topic])[topic].result(60)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    report = Report("transforms")
    compression_ratios(report)
    with (
        kept_on_failure("bench-transforms-", "the brokers' logs") as work,
        contextlib.ExitStack() as running,
    ):
        moto, line = start(s3_server_command(link_by_default=True), "PORT")
        running.callback(moto.terminate)
        endpoint = f"http://127.0.0.1:{line.split()[1]}"
        link = S3Link(endpoint)
        kms = Kms()
        running.callback(kms.process.terminate)
        print(f"link: {link.settings}; {MIB} MiB a round", flush=True)
        contenders = []
        for name, with_kms, tls in (
            ("plain", None, False),
            ("sealed", kms, False),
            ("sealed-url", kms, True),
        ):
            create_bucket(endpoint, name)
            contenders.append(contender(work, name, endpoint, with_kms, tls))
            running.callback(stop, contenders[-1])
        for number in range(rounds):
            for each in contenders if number % 2 == 0 else contenders[::-1]:
                run_round(each, link, kms, number)
        plain, *sealed_ones = contenders
        for sealed, prefix in zip(sealed_ones, ("transform", "transform_url"), strict=True):
            report.ratio_rounds(
                f"{prefix}_tiering_vs_plain",
                [p / s for p, s in zip(plain.tier_s, sealed.tier_s, strict=True)],
                0.8,
            )
            report.ratio_rounds(
                f"{prefix}_cold_read_vs_plain",
                [p / s for p, s in zip(plain.read_s, sealed.read_s, strict=True)],
                1.5,
            )
            report.info(
                f"{prefix}_kms_calls",
                per_segment_copied=round(statistics.median(sealed.kms_per_copy), 3),
                per_segment_read=round(statistics.median(sealed.kms_per_read), 3),
            )
        for each in contenders:
            report.info(
                f"transform_{each.name.replace('-', '_')}_cpu",
                store_s_per_gb_tiered=round(statistics.median(each.tier_cpu_per_gb), 3),
                store_s_per_gb_read=round(statistics.median(each.read_cpu_per_gb), 3),
                broker_s_per_gb_tiered=round(statistics.median(each.broker_tier_cpu_per_gb), 3),
                broker_s_per_gb_read=round(statistics.median(each.broker_read_cpu_per_gb), 3),
                link_bytes_per_byte_read=round(statistics.median(each.link_bytes_per_byte), 3),
            )
        for figure in report.figures:
            if "ratio" not in figure or figure.get("target") is None:
                print(figure, flush=True)
    report.finish()


def stop(contender: Contender) -> None:
    for process in contender.services:
        process.terminate()
    contender.broker.stop()


if __name__ == "__main__":
    main()
