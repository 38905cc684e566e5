"""What idle tiered partitions cost: remotelog's metadata manager against Kafka's own RLMM.

One single-node KRaft broker (the pinned Kafka) at a time holds idle tiered partitions,
nothing to copy, at Kafka's default task interval (30 s), both with the plugin's
RemoteStorageManager on a filesystem segment store:
- remotelog: the plugin's RemoteLogMetadataManager too, calling `remotelog serve
  metadata-manager`;
- Kafka's own: Kafka's TopicBasedRemoteLogMetadataManager.

A topic of 1,000 tiered partitions is created; once SETTLE_S have passed (every
partition's first copy and expiration runs are done) the CPU of the broker and of the
metadata manager is counted over MEASURE_S; then a second topic of 3,000 brings the
broker to 4,000, counted again. Ratio: Kafka's broker over remotelog's broker and
metadata manager together, at 4,000 (the store serves neither while idle). Also
printed: each process's share of a core, and the metadata manager's per 1,000
partitions.
BENCH_JFR=1 records each broker with Java Flight Recorder (profile settings), kept in
the work directory, to find where the broker's time goes.
Run: make setup && .venv/bin/python bench/partitions_idle.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import Report, process_cpu_seconds, serve_metadata_manager
from kafka_plugin import plugin_broker, serve_segment_store

# The tests' Kafka helpers: not in the product.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.kafka_cluster import KafkaNode

from remotelog.dev.broker import free_port

STEPS = (1000, 3000)  # partitions added at each step: 1,000, then 4,000 in all
SETTLE_S = float(os.environ.get("BENCH_SETTLE_S", "45"))
MEASURE_S = float(os.environ.get("BENCH_MEASURE_S", "60"))
# Kafka's default remote.log.manager.task.interval.ms, where operators run it.
TASK_INTERVAL_MS = 30_000


class ProfiledNode(KafkaNode):
    """A broker recorded by Java Flight Recorder into its directory."""

    def _jvm_options(self) -> list[str]:
        recording = self.directory / "broker.jfr"
        return [
            *super()._jvm_options(),
            f"-XX:StartFlightRecording=filename={recording},settings=profile,dumponexit=true",
        ]


def create_idle_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    config = {"remote.storage.enable": "true", "segment.bytes": str(1 << 20)}
    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(300)


def share_of_a_core(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each process's CPU over `seconds` from now, as a share of one core."""
    before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    return {name: (process_cpu_seconds(pid) - before[name]) / seconds for name, pid in pids.items()}


def run_contender(work: Path, name: str) -> list[dict[str, float]]:
    """Each step's CPU shares for one contender: "broker", and "metadata" for remotelog."""
    directory = work / name
    directory.mkdir()
    store_port, metadata_port = free_port(), free_port()
    services = [serve_segment_store(directory, store_port)]
    broker_class = ProfiledNode if os.environ.get("BENCH_JFR") else KafkaNode
    interval = {"remote.log.manager.task.interval.ms": str(TASK_INTERVAL_MS)}
    broker = None
    try:
        if name == "remotelog":
            broker = plugin_broker(
                directory / "kafka", store_port, metadata_port, interval, node_class=broker_class
            )
            metadata, _ = serve_metadata_manager(
                directory, broker.bootstrap_servers, f"127.0.0.1:{metadata_port}"
            )
            services.append(metadata)
        else:
            broker = plugin_broker(
                directory / "kafka",
                store_port,
                metadata_port,
                interval,
                node_class=broker_class,
                kafka_rlmm=True,
            )
        assert broker.pid is not None
        pids = {"broker": broker.pid}
        if name == "remotelog":
            pids["metadata"] = services[1].pid
        shares = []
        for step, partitions in enumerate(STEPS):
            create_idle_topic(broker.bootstrap_servers, f"idle-{step}", partitions)
            time.sleep(SETTLE_S)
            shares.append(share_of_a_core(pids, MEASURE_S))
            print(f"  {name}, {sum(STEPS[: step + 1])} partitions: {shares[-1]}", flush=True)
        return shares
    finally:
        if broker is not None:
            broker.stop()
        for process in services:
            process.terminate()
            process.wait(30)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-partitions-idle-"))
    try:
        ours = run_contender(work, "remotelog")
        theirs = run_contender(work, "kafka")
    except BaseException:
        print(f"kept {work} (the brokers' logs)", file=sys.stderr)
        raise
    report = Report("partitions_idle")
    together = [s["broker"] + s["metadata"] for s in ours]
    report.ratio(
        "idle_partitions_cpu_vs_kafka_rlmm",
        theirs[-1]["broker"] / together[-1],
        0.8,
        ours_pct=round(100 * together[-1], 1),
        theirs_pct=round(100 * theirs[-1]["broker"], 1),
    )
    report.finish()
    for step in range(len(STEPS)):
        partitions = sum(STEPS[: step + 1])
        print(
            f"  {partitions} partitions: remotelog broker {100 * ours[step]['broker']:.1f}% + "
            f"metadata manager {100 * ours[step]['metadata']:.1f}% of a core; Kafka's RLMM "
            f"broker {100 * theirs[step]['broker']:.1f}%"
        )
    per_thousand = 1000 * ours[-1]["metadata"] / sum(STEPS)
    print(f"  metadata manager: {100 * per_thousand:.2f}% of a core per 1,000 partitions")
    if os.environ.get("BENCH_JFR"):
        print(f"  flight recordings: {work}/*/kafka/broker.jfr")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
