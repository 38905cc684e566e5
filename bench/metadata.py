"""Metadata manager: write rate, lookup latency, restart-to-ready, memory per segment.

- add+update events/s through the service (`remotelog serve metadata-manager`
  in its own process, Tansu in another), each write returning only after the
  service consumed it back; beside it, the same events produced and consumed
  back by a bare confluent-kafka producer/consumer pair (the transport's rate).
- GetRemoteLogSegmentMetadata latency p50/p99 through gRPC.
- Restart-to-ready over a topic holding N segment events (default 1,000,000:
  half adds, half COPY_SEGMENT_FINISHED updates), written straight to the
  topic: a full replay (Kafka's way) vs loading the snapshot written at N and
  replaying a tail of TAIL_EVENTS more written after it, each part timed.
  Target: under 10 s with the snapshot and its tail.
- Bytes of memory per live segment in a running manager: what its process
  allocated (tracemalloc) from before it opens to every partition ready, over
  the segments it then holds. Target: under 400.
Run: .venv/bin/python bench/metadata.py [events, default 1000000]
"""

from __future__ import annotations

import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

from common import Report, p99
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from remotelog.client import ClientOptions, MetadataClient
from remotelog.core.config import load_config
from remotelog.core.metadata_serde import serialize
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from remotelog.core.partitioner import metadata_partition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.broker import EmbeddedBroker
from remotelog.metadata import snapshot as snapshots
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.startup import open_metadata_manager
from remotelog.rpc.serve import serve_command

PARTITIONS = 50  # Kafka's default remote.log.metadata.topic.num.partitions
SEGMENTS_PER_PARTITION = 100
WRITE_SEGMENTS = 1000
WRITERS = 16
LOOKUPS = 5000
# Events written after the snapshot, replayed on the restart that loads it.
TAIL_EVENTS = 100_000


def segment(tip: TopicIdPartition, number: int, epoch: int = 0) -> RemoteLogSegmentMetadata:
    start = number * 1000
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tip, uuid.uuid4()),
        start_offset=start,
        end_offset=start + 999,
        max_timestamp_ms=1_700_000_000_000 + start,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=1 << 30,
        segment_leader_epochs={epoch: start},
    )


def copied(metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        metadata.remote_log_segment_id,
        1_700_000_000_001,
        b"remote-size:1073741824",
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        1,
    )


def config_file(directory: Path, bootstrap: str, name: str, **extra: str) -> Path:
    properties = {
        "listen.address": "127.0.0.1:0",
        "bootstrap.servers": bootstrap,
        "remote.log.metadata.topic.num.partitions": str(PARTITIONS),
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.metadata.consumer.fetch.max.wait.ms": "10",
        "remote.log.metadata.snapshot.dir": str(directory / name),
        "remote.log.metadata.snapshot.interval.events": "100000000",
        "remote.log.metadata.snapshot.interval.ms": "3600000",
        **extra,
    }
    path = directory / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    return path


# -- writes and lookups through the service -----------------------------------------


def serve(path: Path) -> tuple[subprocess.Popen[str], int]:
    """The service in its own process, as in production; returns it and its port."""
    process = subprocess.Popen(
        serve_command("metadata-manager", path), stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    line = next(line for line in process.stderr if "serving on" in line)  # past its log lines
    return process, int(line.rsplit(":", 1)[1])


async def through_service(report: Report, directory: Path, bootstrap: str) -> None:
    process, port = serve(config_file(directory, bootstrap, "service"))
    try:
        async with MetadataClient(f"127.0.0.1:{port}", options=ClientOptions(timeout_s=60)) as c:
            tips = [TopicIdPartition(uuid.uuid4(), "bench", p) for p in range(WRITERS)]
            await c.on_partition_leadership_changes(tips)

            async def write(tip: TopicIdPartition) -> None:
                for number in range(WRITE_SEGMENTS // WRITERS):
                    metadata = segment(tip, number)
                    await c.add_remote_log_segment_metadata(metadata)
                    await c.update_remote_log_segment_metadata(copied(metadata))

            started = time.perf_counter()
            await asyncio.gather(*(write(tip) for tip in tips))
            elapsed = time.perf_counter() - started
            events = 2 * (WRITE_SEGMENTS // WRITERS) * WRITERS
            service_rate = events / elapsed
            bare_rate = bare_round_trips(bootstrap, events)
            report.ratio(
                "metadata_write_events_vs_bare_round_trip",
                service_rate / bare_rate,
                None,
                events_per_s=round(service_rate),
                bare_events_per_s=round(bare_rate),
                writers=WRITERS,
            )

            latencies = sorted(await timed_lookups(c, tips, LOOKUPS, random.Random(1)))
            report.info(
                "metadata_lookup_latency_ms",
                p50=round(statistics.median(latencies), 3),
                p99=round(p99(latencies), 3),
                calls=LOOKUPS,
            )
    finally:
        process.terminate()
        process.wait(timeout=30)


async def timed_lookups(
    client: MetadataClient, tips: list[TopicIdPartition], count: int, rng: random.Random
) -> list[float]:
    """`count` lookups of random offsets of the written segments, one after another; each
    one's ms, its answer checked."""
    latencies = []
    for _ in range(count):
        tip = rng.choice(tips)
        offset = rng.randrange(0, (WRITE_SEGMENTS // WRITERS) * 1000)
        begin = time.perf_counter()
        found = await client.remote_log_segment_metadata(tip, 0, offset)
        latencies.append((time.perf_counter() - begin) * 1000)
        assert found is not None
        assert found.start_offset <= offset <= found.end_offset
    return latencies


def bare_round_trips(bootstrap: str, events: int) -> float:
    """The same number of events produced one at a time (acks=all) and each consumed back."""
    topic = f"bench-bare-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "fetch.wait.max.ms": 10}
    )
    producer.produce(topic, value=b"warm-up", partition=0)  # auto-creates the topic
    producer.flush(10)
    consumer.assign([KafkaTopicPartition(topic, 0, 1)])
    value = serialize(segment(TopicIdPartition(uuid.uuid4(), "bare", 0), 1))
    started = time.perf_counter()
    for _ in range(events // WRITERS):
        for _ in range(WRITERS):
            producer.produce(topic, value=value, partition=0)
        producer.flush(10)
        received = 0
        while received < WRITERS:
            received += len(consumer.consume(WRITERS - received, timeout=1))
    elapsed = time.perf_counter() - started
    consumer.close()
    return (events // WRITERS) * WRITERS / elapsed


# -- restart -----------------------------------------------------------------------------


def fill_topic(
    bootstrap: str, topic: str, events: int, prefix: str = "topic"
) -> list[TopicIdPartition]:
    """events/2 segments (add + COPY_SEGMENT_FINISHED), SEGMENTS_PER_PARTITION per partition,
    of new topics named `prefix`-N."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    segments = events // 2
    tips = [
        TopicIdPartition(uuid.uuid4(), f"{prefix}-{n // 10}", n % 10)
        for n in range(max(1, segments // SEGMENTS_PER_PARTITION))
    ]
    written = 0
    for tip in tips:
        part = metadata_partition(tip, PARTITIONS)
        for number in range(SEGMENTS_PER_PARTITION):
            if written >= segments:
                break
            metadata = segment(tip, number, epoch=number // 25)
            for event in (metadata, copied(metadata)):
                while True:
                    try:
                        producer.produce(topic, value=serialize(event), partition=part)
                        break
                    except BufferError:
                        producer.poll(0.1)
            written += 1
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the broker did not take every event")
    return tips


async def time_to_ready(config: MetadataManagerConfig, topic: str, tips: list[TopicIdPartition]):
    started = time.perf_counter()
    manager = await open_metadata_manager(config, topic=topic)
    # One user partition per metadata partition assigns them all (each holds many).
    firsts = {}
    for tip in tips:
        firsts.setdefault(metadata_partition(tip, PARTITIONS), tip)
    await manager.on_partition_leadership_changes(firsts.values(), [])
    while True:
        if all(manager.store.is_ready(tip) for tip in firsts.values()):
            break
        await asyncio.sleep(0.005)
    return manager, time.perf_counter() - started


async def restart(report: Report, directory: Path, bootstrap: str, events: int) -> None:
    topic = f"__remote_log_metadata_bench_{uuid.uuid4().hex[:8]}"
    filled = time.perf_counter()
    config, _ = load_config(MetadataManagerConfig, config_file(directory, bootstrap, "restart"))
    # Create the topic with its partition count before filling it.
    manager = await open_metadata_manager(config, topic=topic)
    await manager.close()
    tips = fill_topic(bootstrap, topic, events)
    print(f"wrote {events} events in {time.perf_counter() - filled:.1f} s", file=sys.stderr)
    Path(config.snapshot_dir, snapshots.FILE_NAME).unlink()

    manager, replay_s = await time_to_ready(config, topic, tips)
    segments = manager.segment_count()
    assert segments == events // 2, (segments, events)
    assert manager.events_applied == events
    written = time.perf_counter()
    snapshot_path = await manager.write_snapshot()
    snapshot_write_s = time.perf_counter() - written
    await manager.close()

    # Segments tiered after the snapshot: the restart replays them as its tail.
    tips += fill_topic(bootstrap, topic, TAIL_EVENTS, prefix="after-snapshot")
    started = time.perf_counter()
    loaded = snapshots.load(Path(config.snapshot_dir))
    load_s = time.perf_counter() - started
    assert loaded is not None
    manager, snapshot_s = await time_to_ready(config, topic, tips)
    assert manager.snapshot_status == "loaded"
    assert manager.events_applied == TAIL_EVENTS
    assert manager.segment_count() == segments + TAIL_EVENTS // 2
    await manager.close()
    report.info("metadata_restart_full_replay_s", seconds=round(replay_s, 2), events=events)
    report.info(
        "metadata_snapshot",
        write_s=round(snapshot_write_s, 2),
        bytes=snapshot_path.stat().st_size,
        segments=segments,
    )
    report.latency(
        "metadata_restart_with_snapshot_and_tail",
        snapshot_s * 1000,
        10_000,
        snapshot_load_s=round(load_s, 2),
        tail_replay_s=round(max(snapshot_s - load_s, 0.0), 2),
        tail_events=TAIL_EVENTS,
        snapshot_events=events,
    )

    # A running manager: everything its start allocated and kept, once ready.
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    manager, _ = await time_to_ready(config, topic, tips)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    live = manager.segment_count()
    await manager.close()
    per_segment = (held - before) / live
    report.ratio(
        "metadata_bytes_per_segment_vs_target",
        400 / per_segment,
        1.0,
        bytes_per_segment=round(per_segment),
        segments=live,
        measured="running manager",
    )


async def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    report = Report("metadata")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        directory = Path(tmp)
        await through_service(report, directory, broker.bootstrap_servers)
        await restart(report, directory, broker.bootstrap_servers, events)
    for figure in report.figures:
        print(figure, file=sys.stderr)
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
