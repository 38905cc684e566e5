"""A broker rebuilt from the remote tier against one rebuilt from its peer's disk.

KIP-405's test case 3, on this machine: two Apache Kafka brokers in one KRaft
cluster (node 1 broker and controller, node 2 broker only), both with the
remotelog plugin and the services (filesystem segment store, metadata manager
with its topic on both brokers). A topic of PARTITIONS partitions, both brokers
its replicas and node 1 its leader, is filled with MIB_PER_PARTITION of
incompressible 1 KiB records in 1 MiB segments. Then node 2 is stopped, its
data directory deleted, and started again. The rebuild lasts from the start of
its replica fetcher for the topic (Kafka's clock, in node 2's log) until node 1
lists it in every partition's ISR (watched from before its start); the time
with start-up is from its process start. Its bytes are what it fetched from
the leader (Kafka's ReplicationBytesInPerSec, through JMX). Each way runs on a
cluster of its own, ROUNDS rebuilds each (medians):
- local: remote storage off; node 2 fetches the whole topic from node 1;
- tiered: remote storage on, local.retention.bytes of LOCAL_MIB a partition:
  node 2 builds its leader-epoch cache and producer state from the remote tier
  through the plugin and fetches from node 1's local log start (Kafka's default);
- tiered, KIP-1023: the same with follower.fetch.last.tiered.offset.enable: it
  fetches from the offset after the last tiered one (reported).
The rebuild from the process start (start-up included, as an operator waits it) is a
figure of its own. BENCH_ROUNDS rebuilds a way (default 5): each round's ratio pairs
the i-th rebuilds, and the spread is printed.
Run: .venv/bin/python bench/broker_rebuild.py [MiB a partition, default 1024]
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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import Report
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_plugin import (
    SEGMENT_BYTES,
    KafkaNode,
    plugin_broker,
    produce_incompressible,
    serve_plugin_services,
)

from remotelog.dev.broker import free_port

PARTITIONS = 4
LOCAL_MIB = 2
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
TOPIC = "rebuilt"
# Both brokers hold every internal topic: the wiped one loses nothing but its disk.
PAIR = {
    "offsets.topic.replication.factor": "2",
    "transaction.state.log.replication.factor": "2",
    "auto.leader.rebalance.enable": "false",
}
KIP_1023 = "follower.fetch.last.tiered.offset.enable"
REPLICATION_BYTES = "kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesInPerSec"
TIMEOUT_S = 900
# The controller refuses a new incarnation of node 2 (DUPLICATE_BROKER_REGISTRATION, the
# broker retrying every 2 s) until the old one's session lapses, broker.session.timeout.ms
# (9 s) after its last heartbeat, even after a clean controlled shutdown. Node 2 starts
# again only once it has: otherwise up to 9 s of Kafka's own wait fall in the start-up,
# or, as the fetchers start before the registration, in the rebuild.
SESSION_LAPSE_S = 10.0
REFUSED = "DUPLICATE_BROKER_REGISTRATION"
_FETCHER = re.compile(r"^\[([\d-]+ [\d:,]+)\] INFO .*Added fetcher to broker")


@dataclass
class Way:
    name: str
    tiered: bool
    last_tiered: bool = False
    seconds: list[float] = field(default_factory=list)
    with_start_s: list[float] = field(default_factory=list)
    fetched: list[float] = field(default_factory=list)
    # Registrations the controller refused in node 2's start-ups (0 after SESSION_LAPSE_S).
    refused: list[int] = field(default_factory=list)


def fill(bootstrap: str, mib: int, tiered: bool) -> None:
    config = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
    if tiered:
        config |= {
            "remote.storage.enable": "true",
            "local.retention.ms": "-2",
            "local.retention.bytes": str(LOCAL_MIB * 1024 * 1024),
        }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(TOPIC, PARTITIONS, replica_assignment=[[1, 2]] * PARTITIONS, config=config)
    admin.create_topics([new])[TOPIC].result(60)
    produce_incompressible(bootstrap, TOPIC, PARTITIONS, mib)


def log_files(broker: KafkaNode) -> list[Path]:
    return [p for n in range(PARTITIONS) for p in (broker.data_dir / f"{TOPIC}-{n}").glob("*.log")]


def wait_tiered(brokers: list[KafkaNode]) -> None:
    """Until local retention left at most LOCAL_MIB and the active segment a partition
    on each broker: the rest is in the remote tier."""
    most = PARTITIONS * (LOCAL_MIB + 2)
    deadline = time.monotonic() + TIMEOUT_S
    while any(len(log_files(b)) > most for b in brokers):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not tiered in {TIMEOUT_S} s\n{brokers[0].log_tail()}")
        time.sleep(0.5)


def in_sync(admin: AdminClient) -> bool:
    try:
        described = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30)
    except KafkaException:
        return False  # asked node 2 as it stopped
    return all(2 in [n.id for n in p.isr] for p in described.partitions)


def rebuild(second: KafkaNode, admin: AdminClient, way: Way) -> None:
    """Node 2 wiped and started again; the rebuild lasts from its fetcher's start for
    the topic (Kafka's clock, in its log) until it is in every partition's ISR (watched
    from node 1 while node 2 starts: a short rebuild ends before start-up does)."""
    second.stop()
    second.wipe()
    time.sleep(SESSION_LAPSE_S)
    began = time.time()
    starting = threading.Thread(target=second.start)
    starting.start()
    while not in_sync(admin):
        if time.time() - began > TIMEOUT_S:
            raise RuntimeError(f"{way.name}: not in sync\n{second.log_tail()}")
        time.sleep(0.05)
    done = time.time()
    starting.join()
    fetching = [line for line in second.run_log() if _FETCHER.match(line) and f"{TOPIC}-" in line]
    stamp = datetime.datetime.strptime(_FETCHER.match(fetching[0])[1], "%Y-%m-%d %H:%M:%S,%f")
    way.seconds.append(done - stamp.replace(tzinfo=datetime.UTC).timestamp())
    way.with_start_s.append(done - began)
    way.fetched.append(sum(second.jmx(REPLICATION_BYTES).values()))
    way.refused.append(sum(REFUSED in line for line in second.run_log()))


def run(way: Way, mib: int) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"remotelog-bench-rebuild-{way.name.split()[0]}-"))
    store_port, metadata_port = free_port(), free_port()
    brokers: list[KafkaNode] = []
    services: list[subprocess.Popen[str]] = []
    try:
        first = plugin_broker(work / "1", store_port, metadata_port, PAIR)
        brokers.append(first)
        properties = {**PAIR, KIP_1023: str(way.last_tiered).lower()}
        node = {"node_id": 2, "quorum": first, "jmx_port": free_port()}
        second = plugin_broker(work / "2", store_port, metadata_port, properties, **node)
        brokers.append(second)
        services = serve_plugin_services(
            work, first.bootstrap_servers, store_port, metadata_port, metadata_replication=2
        )
        admin = AdminClient({"bootstrap.servers": first.bootstrap_servers})
        began = time.monotonic()
        fill(first.bootstrap_servers, mib, way.tiered)
        if way.tiered:
            wait_tiered(brokers)
        print(f"{way.name}: filled in {time.monotonic() - began:.1f} s", flush=True)
        for _ in range(ROUNDS):
            rebuild(second, admin, way)
            print(
                f"{way.name}: rebuilt in {way.seconds[-1]:.2f} s "
                f"({way.with_start_s[-1]:.2f} s with start-up), "
                f"{way.fetched[-1] / 1e6:.1f} MB fetched, registration refused "
                f"{way.refused[-1]} times",
                flush=True,
            )
    finally:
        for broker in reversed(brokers):
            broker.stop()
        for process in services:
            process.terminate()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    report = Report("broker_rebuild")
    ways = [Way("local", False), Way("tiered", True), Way("tiered KIP-1023", True, True)]
    for way in ways:
        run(way, mib)
    local, tiered, last_tiered = ways
    print(
        f"{mib * PARTITIONS} MiB in {PARTITIONS} partitions, {LOCAL_MIB} MiB a partition "
        f"kept locally when tiered; median of {ROUNDS} rebuilds:"
    )
    for way in ways:
        start_up = [w - s for w, s in zip(way.with_start_s, way.seconds, strict=True)]
        print(
            f"  {way.name}: {statistics.median(way.seconds):.2f} s "
            f"({min(way.seconds):.2f}-{max(way.seconds):.2f}; "
            f"{statistics.median(way.with_start_s):.2f} s with start-up, "
            f"{min(way.with_start_s):.2f}-{max(way.with_start_s):.2f}; start-up until the "
            f"fetcher {statistics.median(start_up):.2f} s, "
            f"{min(start_up):.2f}-{max(start_up):.2f}), "
            f"{statistics.median(way.fetched) / 1e6:.1f} MB fetched"
        )
    for name, way, target in (("", tiered, 10.0), (" (KIP-1023)", last_tiered, None)):
        # Each round's ratio pairs the i-th rebuild of each cluster: their spread.
        for figure, ours, theirs in (
            ("time", way.seconds, local.seconds),
            ("bytes", way.fetched, local.fetched),
        ):
            ratios = [t / o for o, t in zip(ours, theirs, strict=True)]
            report.ratio_rounds(f"rebuild_{figure}_tiered_vs_local{name}", ratios, target)
    # From the wiped broker's process start: start-up counts, as an operator waits it.
    from_start = [t / o for o, t in zip(tiered.with_start_s, local.with_start_s, strict=True)]
    report.ratio_rounds("rebuild_from_start_tiered_vs_local", from_start, 3.0)
    report.finish()


if __name__ == "__main__":
    main()
