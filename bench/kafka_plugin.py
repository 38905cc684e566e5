"""Apache Kafka tiering through the remotelog plugin against Kafka with its own LocalTieredStorage.

Two single-node KRaft brokers run side by side, idle while the other is measured,
both Apache Kafka 4.3.1: LocalTieredStorage lives in kafka-storage's test jar,
which Maven Central serves up to 4.3.1 and which does not run in the pinned 4.4
(`make bench-setup` resolves that Kafka and the test jars, jvm/kafka-bench):
- remotelog: the plugin as RemoteStorageManager and RemoteLogMetadataManager,
  calling `remotelog serve segment-store` (filesystem backend, on this host: it
  hands out file URLs, and the plugin reads segment logs from the page cache)
  and `remotelog serve metadata-manager` (its topic on the same broker);
- Kafka's own: LocalTieredStorage writing into a directory on the same disk,
  with Kafka's TopicBasedRemoteLogMetadataManager.

Each round, on each broker in turn (the order rotates): a new topic of
PARTITIONS partitions with 1 MiB segments and remote storage off is filled with
MIB_PER_PARTITION of incompressible 1 KiB records; then `remote.storage.enable`
and a one-second `local.retention.ms` are set. Tiering time: from that change to
the last "Copied ... to remote storage" line in the broker's own log (Kafka's
clock); tiered bytes: the rolled segments' .log bytes. Then a plain consumer
reads the topic from offset 0 through the broker, which serves all but the
active segment from remote storage: records/s. Then the topic is deleted, and
the round ends when its remote tier holds none of it. Ratios are medians of the
per-round ratios (remotelog / Kafka's own), printed with their spread; the broker
JVM's (and for remotelog the services') CPU seconds per GB beside them. Last, each
broker, holding one more tiered topic, is restarted BENCH_START_UPS times (default 3):
seconds from its process start until it is registered, unfenced and leads every
partition (broker_start: Kafka's own over remotelog).
Run: make bench-setup && .venv/bin/python bench/kafka_plugin.py [rounds, default 5]
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import Report, process_cpu_seconds, serve, serve_metadata_manager

# The tests' Kafka helpers (a second node, JMX, a wiped disk): not in the product.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.kafka_cluster import KafkaNode, with_kafka_rlmm

from remotelog.dev.broker import free_port
from remotelog.dev.kafka_broker import (
    QUICK_RETENTION,
    KafkaBroker,
    plugin_jar,
    tiered_storage_properties,
)

ROOT = Path(__file__).resolve().parents[1]
BENCH_LIBS = ROOT / ".tools" / "kafka" / "bench-libs"
PARTITIONS = 3
MIB_PER_PARTITION = int(os.environ.get("BENCH_MIB_PER_PARTITION", "48"))
RECORD_BYTES = 1024
# Kafka's floor, so a round rolls many segments; the services' cost is per segment.
SEGMENT_BYTES = int(os.environ.get("BENCH_SEGMENT_MIB", "1")) * 1024 * 1024
TASK_INTERVAL_MS = 200
START_UPS = int(os.environ.get("BENCH_START_UPS", "3"))
# How the plugin copies (its copy.method): path, the store reading the broker's files
# (the default here: the store is on the broker's host), or stream, through gRPC.
COPY_METHOD = os.environ.get("BENCH_COPY_METHOD", "path")
GB = 1e9
_COPIED = re.compile(r"^\[([\d-]+ [\d:,]+)\] .*Copied \S+ to remote storage with segment-id")


def local_tiered_storage_properties(directory: Path) -> dict[str, str]:
    """Kafka's own tiered storage: LocalTieredStorage (on the broker's class path, from
    the test jars in BENCH_LIBS) and the topic-based RLMM."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": (
            "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
        ),
        "rsm.config.dir": str(directory),
        "rsm.config.delete.on.close": "false",
        "remote.log.metadata.manager.class.name": (
            "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
        ),
        # Kafka hands its RLMM this listener's address to reach the metadata topic.
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
        "remote.log.manager.task.interval.ms": str(TASK_INTERVAL_MS),
    }


@dataclass
class Contender:
    name: str
    broker: KafkaBroker
    # Where its remote tier keeps segments (the store's root, LocalTieredStorage's dir).
    remote_root: Path
    services: list[subprocess.Popen[str]] = field(default_factory=list)
    tier_s: list[float] = field(default_factory=list)
    read_s: list[float] = field(default_factory=list)
    # Segments tiered each round.
    segments: list[int] = field(default_factory=list)
    cpu: dict[str, list[float]] = field(default_factory=dict)

    def cpu_now(self) -> dict[str, float]:
        assert self.broker.pid is not None
        found = {"broker": process_cpu_seconds(self.broker.pid)}
        found.update(
            {f"service{i}": process_cpu_seconds(p.pid) for i, p in enumerate(self.services)}
        )
        return found

    def count(self, phase: str, before: dict[str, float]) -> None:
        for process, seconds in self.cpu_now().items():
            self.cpu.setdefault(f"{phase} {process}", []).append(seconds - before[process])


def admin(broker: KafkaBroker):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def fill_topic(broker: KafkaBroker, topic: str) -> int:
    """A new topic with remote storage off, filled; the number of records."""
    from confluent_kafka.admin import NewTopic

    config = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
    client = admin(broker)
    client.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(60)
    return produce_incompressible(broker.bootstrap_servers, topic, PARTITIONS, MIB_PER_PARTITION)


def produce_incompressible(bootstrap: str, topic: str, partitions: int, mib: int) -> int:
    """`mib` MiB of incompressible 1 KiB records to each partition; the number of records."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    records = mib * 1024 * 1024 // RECORD_BYTES
    value = os.urandom(RECORD_BYTES * 64)
    for number in range(records):
        for partition in range(partitions):
            start = (number * 17 + partition) % 63 * RECORD_BYTES
            while True:
                try:
                    producer.produce(
                        topic, value[start : start + RECORD_BYTES], partition=partition
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(300) == 0
    return records * partitions


def rolled(broker: KafkaBroker, topic: str) -> tuple[int, int]:
    """(segments, .log bytes) of the topic's rolled segments on the broker's disk."""
    count = size = 0
    for partition in range(PARTITIONS):
        logs = sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log"))
        count += len(logs) - 1
        size += sum(p.stat().st_size for p in logs[:-1])
    return count, size


def copied_lines(broker: KafkaBroker) -> list[float]:
    """Kafka's own time (epoch s) of each "Copied ... to remote storage" in its log."""
    assert broker.log_path is not None
    found = []
    for line in broker.log_path.read_text(errors="replace").splitlines():
        match = _COPIED.match(line)
        if match:
            stamp = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f")
            found.append(stamp.replace(tzinfo=datetime.UTC).timestamp())
    return found


def tier(contender: Contender, topic: str, segments: int) -> float:
    """Turn tiering on; seconds until Kafka logged the last of `segments` copies."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    already = len(copied_lines(contender.broker))
    entries = [
        ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("local.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
    ]
    resource = ConfigResource("TOPIC", topic, incremental_configs=entries)
    client = admin(contender.broker)
    began = time.time()
    client.incremental_alter_configs([resource])[resource].result(60)
    deadline = time.monotonic() + 600
    while True:
        copies = copied_lines(contender.broker)[already:]
        if len(copies) >= segments:
            return copies[segments - 1] - began
        if time.monotonic() > deadline:
            raise RuntimeError(f"{contender.name}: {len(copies)} of {segments} copied")
        time.sleep(0.2)


def wait_local_deleted(
    broker: KafkaBroker, topic: str, partitions: int = PARTITIONS, timeout_s: float = 300
) -> None:
    """Until only the active segment of each partition is left on the broker's disk."""
    deadline = time.monotonic() + timeout_s
    while any(
        len(list((broker.data_dir / f"{topic}-{p}").glob("*.log"))) > 1 for p in range(partitions)
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: local segments were not deleted\n{broker.log_tail()}")
        time.sleep(0.2)


def read_all(broker: KafkaBroker, topic: str, records: int) -> float:
    """Seconds a plain consumer takes to read the topic from offset 0 to its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"bench-{topic}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen, ended = 0, set()
    began = time.perf_counter()
    while len(ended) < PARTITIONS:
        for message in consumer.consume(10_000, 1.0):
            error = message.error()
            if error is None:
                seen += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition())
            else:
                raise RuntimeError(str(error))
    seconds = time.perf_counter() - began
    consumer.close()
    if seen != records:
        raise RuntimeError(f"read {seen} records of {records}")
    return seconds


def remote_files(contender: Contender, topic: str) -> list[Path]:
    """The topic's files in the remote tier: both keep them under a folder named
    `<topic>-...` (the topic id or the partition follows)."""
    root = contender.remote_root
    while True:
        try:
            return [
                path
                for path in root.rglob("*")
                if path.is_file()
                and any(part.startswith(f"{topic}-") for part in path.relative_to(root).parts)
            ]
        except FileNotFoundError:
            continue  # a directory deleted while it was listed: list again


def delete_topic(contender: Contender, topic: str) -> None:
    """Delete the round's topic and wait until its remote tier holds none of it, so
    every round starts from the same state: otherwise the tiered partitions of past
    rounds pile up, and Kafka's copy and expiration tasks visit each of them every
    task interval (200 ms here) while the next round is measured."""
    if not remote_files(contender, topic):
        raise RuntimeError(f"{contender.name}: {topic} is not in {contender.remote_root}")
    client = admin(contender.broker)  # held: a collected client fails its futures
    client.delete_topics([topic])[topic].result(60)
    deadline = time.monotonic() + 300
    while remote_files(contender, topic):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{contender.name}: {topic} is still in its remote tier")
        time.sleep(0.2)


def leads_all(broker: KafkaBroker, topic: str) -> bool:
    from confluent_kafka import KafkaException, TopicCollection

    client = admin(broker)  # held: a collected client fails its futures
    try:
        described = client.describe_topics(TopicCollection([topic]))[topic].result(5)
    except (KafkaException, TimeoutError):
        return False  # not answering yet
    leaders = [p.leader.id if p.leader is not None else None for p in described.partitions]
    return leaders == [broker.node_id] * PARTITIONS


def start_ups(contender: Contender) -> list[float]:
    """The broker, holding a tiered topic, stopped and started START_UPS times: seconds
    from its process start until it is registered, unfenced and leads every partition."""
    topic = f"start-up-{contender.name}"
    fill_topic(contender.broker, topic)
    segments, _ = rolled(contender.broker, topic)
    tier(contender, topic, segments)
    wait_local_deleted(contender.broker, topic)
    seconds = []
    for _ in range(START_UPS):
        contender.broker.stop()
        began = time.monotonic()
        contender.broker.start()
        while not leads_all(contender.broker, topic):
            if time.monotonic() - began > 300:
                raise RuntimeError(f"{contender.name}: no leader\n{contender.broker.log_tail()}")
            time.sleep(0.05)
        seconds.append(time.monotonic() - began)
    return seconds


def run_round(contender: Contender, number: int) -> int:
    """One round on one broker; the bytes tiered."""
    topic = f"bench-{contender.name}-{number}"
    records = fill_topic(contender.broker, topic)
    segments, size = rolled(contender.broker, topic)
    before = contender.cpu_now()
    contender.tier_s.append(tier(contender, topic, segments))
    contender.count("tier", before)
    contender.segments.append(segments)
    wait_local_deleted(contender.broker, topic)
    before = contender.cpu_now()
    contender.read_s.append(read_all(contender.broker, topic, records))
    contender.count("read", before)
    delete_topic(contender, topic)
    return size


def plugin_broker(
    directory: Path,
    store_port: int,
    metadata_port: int,
    properties: Mapping[str, str] | None = None,
    node_class: type[KafkaNode] = KafkaNode,
    kafka_rlmm: bool = False,
    **broker: Any,
) -> KafkaNode:
    """A started broker tiering through the remotelog plugin to the services on these
    ports (with `kafka_rlmm`, through Kafka's own RLMM and the plugin's storage manager);
    the plugin reads segment logs by the file URLs the store hands out and copies
    segments by path (the store's `copy.paths.allowed` must hold `directory`).
    `properties` go over the broker's, `broker` are KafkaNode's fields."""
    settings = {
        **tiered_storage_properties(
            plugin_jar(),
            f"127.0.0.1:{store_port}",
            f"127.0.0.1:{metadata_port}",
            task_interval_ms=TASK_INTERVAL_MS,
            storage_settings={"fetch.urls.enabled": "true", "copy.method": COPY_METHOD},
        ),
        **QUICK_RETENTION,
        **(properties or {}),
    }
    if kafka_rlmm:
        settings = with_kafka_rlmm(settings, metadata_partitions=5)
    return node_class(directory, properties=settings, **broker).start()


def serve_segment_store(work: Path, port: int, **store: str) -> subprocess.Popen[str]:
    """The filesystem segment store under `work`, handing out file URLs and copying the
    segments of brokers under `work` by path."""
    process, _ = serve(
        "segment-store",
        work / "store.properties",
        {
            "listen.address": f"127.0.0.1:{port}",
            "storage.backend": "filesystem",
            "storage.root": str(work / "segments"),
            "storage.filesystem.fetch.urls.enabled": "true",
            "copy.paths.allowed": str(work),
            **store,
        },
    )
    return process


def serve_plugin_services(
    work: Path,
    bootstrap_servers: str,
    store_port: int,
    metadata_port: int,
    metadata_replication: int = 1,
    **store: str,
) -> list[subprocess.Popen[str]]:
    """The filesystem segment store (handing out file URLs; `store` adds settings) and
    the metadata manager that `plugin_broker`'s plugin calls, its topic with
    `metadata_replication` replicas."""
    segment_store = serve_segment_store(work, store_port, **store)
    metadata, _ = serve_metadata_manager(
        work, bootstrap_servers, f"127.0.0.1:{metadata_port}", metadata_replication
    )
    return [segment_store, metadata]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if not any(BENCH_LIBS.glob("kafka-storage-*-test.jar")):
        sys.exit(f"{BENCH_LIBS} has no LocalTieredStorage: run `make bench-setup` first")
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-plugin-"))
    contenders: list[Contender] = []
    try:
        store_port, metadata_port = free_port(), free_port()
        # Both brokers run the Kafka of the test jars.
        plugin = plugin_broker(work / "remotelog", store_port, metadata_port, libs=BENCH_LIBS)
        contenders.append(Contender("remotelog", plugin, work / "segments"))
        contenders[0].services = serve_plugin_services(
            work, plugin.bootstrap_servers, store_port, metadata_port
        )
        local = KafkaBroker(
            work / "kafka",
            libs=BENCH_LIBS,
            properties={
                **local_tiered_storage_properties(work / "local-tiered"),
                **QUICK_RETENTION,
            },
        ).start()
        contenders.append(Contender("kafka", local, work / "local-tiered"))
        sizes = []
        for number in range(rounds + 1):  # the first is a warm-up, not counted
            order = contenders if number % 2 == 0 else contenders[::-1]
            for contender in order:
                sizes.append(run_round(contender, number))
            if number == 0:
                for contender in contenders:
                    contender.tier_s.clear()
                    contender.read_s.clear()
                    contender.cpu.clear()
                    contender.segments.clear()
                sizes.clear()
        starts = {c.name: start_ups(c) for c in contenders}
        report_figures(contenders, statistics.median(sizes), starts)
    except BaseException:
        print(f"kept {work} (the brokers' logs)", file=sys.stderr)
        raise
    else:
        shutil.rmtree(work, ignore_errors=True)
    finally:
        for contender in contenders:
            for process in contender.services:
                process.terminate()
            contender.broker.stop()


def tier_cpu(contender: Contender) -> list[float]:
    """Each round's CPU seconds while tiering, all of the contender's processes together."""
    phases = [seconds for what, seconds in contender.cpu.items() if what.startswith("tier ")]
    return [sum(round_) for round_ in zip(*phases, strict=True)]


def report_figures(
    contenders: list[Contender], size: float, starts: dict[str, list[float]]
) -> None:
    remotelog, kafka = contenders
    report = Report("kafka_plugin")
    tiering = [k / r for r, k in zip(remotelog.tier_s, kafka.tier_s, strict=True)]
    reading = [k / r for r, k in zip(remotelog.read_s, kafka.read_s, strict=True)]
    report.ratio_rounds("kafka_tiering_remotelog_vs_local_tiered_storage", tiering, 1.0)
    report.ratio_rounds("kafka_remote_read_remotelog_vs_local_tiered_storage", reading, 0.9)
    # CPU while tiering, every process of each side together: the broker, and for
    # remotelog its segment store and metadata manager.
    report.ratio_rounds(
        "kafka_tiering_cpu_vs_local_tiered_storage",
        [k / r for r, k in zip(tier_cpu(remotelog), tier_cpu(kafka), strict=True)],
        0.8,
    )
    starting = [k / r for r, k in zip(starts["remotelog"], starts["kafka"], strict=True)]
    report.ratio_rounds("broker_start", starting, 0.9)
    report.finish()
    for name, seconds in starts.items():
        print(
            f"  {name}: start-up until it leads its tiered partitions "
            f"{statistics.median(seconds):.2f} s ({min(seconds):.2f}-{max(seconds):.2f})"
        )
    for contender in contenders:
        tier_mb_s = size / 1e6 / statistics.median(contender.tier_s)
        read_mb_s = size / 1e6 / statistics.median(contender.read_s)
        print(
            f"  {contender.name}: tiering {tier_mb_s:.0f} MB/s "
            f"({min(contender.tier_s):.2f}-{max(contender.tier_s):.2f} s), remote read "
            f"{read_mb_s:.0f} MB/s ({min(contender.read_s):.2f}-{max(contender.read_s):.2f} s)"
        )
        for what, seconds in contender.cpu.items():
            print(f"    {what} {statistics.median(seconds) / (size / GB):.2f} CPU s per GB")
        if contender.services:
            per_segment = [
                seconds / segments
                for seconds, segments in zip(
                    contender.cpu["tier service1"], contender.segments, strict=True
                )
            ]
            print(
                f"    tier metadata manager {statistics.median(per_segment) * 1000:.1f} CPU ms "
                f"per segment ({statistics.median(contender.segments)} segments a round)"
            )
    print(
        f"  {PARTITIONS} partitions x {size / 1e6 / PARTITIONS:.1f} MB of rolled segments a round"
    )
    print(f"  brokers: {kafka.broker.version}")


if __name__ == "__main__":
    main()
