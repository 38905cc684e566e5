"""Copy scheduler: tiering throughput over 50 partitions, and CPU with 10,000 idle partitions.

- Copy: 50 partitions with rolled segments in a broker log dir; the scheduler
  (`remotelog serve copy-scheduler`, beside `segment-store` and
  `metadata-manager`, each its own process, Tansu for the metadata topic) tiers
  them all at Kafka's default task interval; MB/s of segment bytes from the
  leadership call until every partition's highest tiered offset is its last
  rolled offset. Baseline in the same run: aioboto3 uploading the same files
  (log and indexes) to the same moto server, 10 at a time (the copier pool's
  size). Target (issue 6): >= 0.8x. Measured three ways: through the segment
  store service, through its short circuit (the scheduler lends the segment
  files' descriptors over the store's unix socket), and with direct storage
  writes (the store in the scheduler's process). Rounds run the bare upload
  and the three modes in an order rotated each round, each on fresh
  partitions (new topic ids) onto an emptied bucket: moto holding the other
  side's 400 MiB spent half as much CPU again per PUT. Each ratio is the
  median of its per-round ratios, printed with their spread; beside it, each
  process's CPU seconds per GB (the copy is bound by the CPU of four
  processes on two cores).
- Idle: 10,000 partitions with nothing to copy and nothing tiered, then 2,000
  with one tiered segment each (kept by retention); the scheduler's (and the
  metadata manager's) CPU seconds per `remote.log.manager.task.interval.ms`
  once they are all tiered, averaged over LISTING_MAX_USES intervals so that
  the expiration task's periodic listings are counted.
(Not bench/copy.py: that name would shadow the standard library `copy` module.)
Run: .venv/bin/python bench/copy_scheduler.py [MiB per segment, default 4]
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aioboto3
from aiobotocore.config import AioConfig
from common import (
    Report,
    RoundPlan,
    Timed,
    bench_stack,
    cpu_of,
    interleaved_async,
    own_cpu,
    s3_server_command,
    serve,
    serve_metadata_manager,
    start,
    tree_cpu_seconds,
)

from remotelog.client import ClientOptions, CopySchedulerClient, PartitionAssignment
from remotelog.core.model import TopicIdPartition
from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.kafka.state_files import HW_CHECKPOINT, write_hw_checkpoint
from remotelog.scheduler.retention import LISTING_MAX_USES

MIB = 1024 * 1024
PARTITIONS = 50
SEGMENTS = 2
IDLE_PARTITIONS = int(os.environ.get("IDLE_PARTITIONS", "10000"))
IDLE_TIERED_PARTITIONS = int(os.environ.get("IDLE_TIERED_PARTITIONS", "2000"))
IDLE_INTERVAL_S = 5
COPIERS = 10


def write_partitions(
    log_dir: Path, count: int, segments: int, segment_bytes: int
) -> list[PartitionLog]:
    """`count` partitions of `segments` rolled segments of about `segment_bytes` each."""
    logs = []
    value = os.urandom(64 * 1024)
    for number in range(count):
        tip = TopicIdPartition(uuid.uuid4(), "bench", number)
        log = PartitionLog.create(log_dir, tip.topic, tip.partition, tip.topic_id, LogConfig())
        for _ in range(segments):
            while log.active_segment.size < segment_bytes:
                log.append([(None, value)] * 4, leader_epoch=0)
            log.roll()
        logs.append(log)
    # One checkpoint for the log dir, a line per partition, as the broker writes it.
    write_hw_checkpoint(
        log_dir / HW_CHECKPOINT,
        {("bench", number): log.log_end_offset for number, log in enumerate(logs)},
    )
    return logs


def s3_session() -> aioboto3.Session:
    return aioboto3.Session(
        aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )


async def empty_bucket(endpoint: str, bucket: str, *, create: bool = False) -> None:
    """Delete every object in `bucket` (or create it), so moto's next writes start as
    the first did."""
    config = AioConfig(s3={"addressing_style": "path"})
    async with s3_session().client("s3", endpoint_url=endpoint, config=config) as s3:
        if create:
            await s3.create_bucket(Bucket=bucket)
        async for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                await s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})


async def bare_upload(endpoint: str, bucket: str, logs: list[PartitionLog]) -> float:
    files = [
        s.path(suffix)
        for log in logs
        for s in log.segments[:-1]
        for suffix in (".log", ".index", ".timeindex")
    ]
    config = AioConfig(s3={"addressing_style": "path"}, max_pool_connections=COPIERS * 2)
    async with s3_session().client("s3", endpoint_url=endpoint, config=config) as s3:
        queue: asyncio.Queue[Path] = asyncio.Queue()
        for path in files:
            queue.put_nowait(path)

        async def worker() -> None:
            while not queue.empty():
                path = queue.get_nowait()
                await s3.upload_file(str(path), bucket, f"bare/{path.parent.name}/{path.name}")

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(COPIERS)))
        return time.perf_counter() - began


def cpu_readers(pids: dict[str, int]) -> dict[str, Callable[[], float]]:
    """CPU seconds of each named process tree; "client" is this process alone."""
    return {name: cpu_of(pid) for name, pid in pids.items()} | {"client": own_cpu}


async def timed(
    run: Callable[[], Awaitable[float]], readers: dict[str, Callable[[], float]]
) -> Timed:
    """`run`'s own seconds, and the CPU each reader's process spent meanwhile."""
    before = {name: read() for name, read in readers.items()}
    seconds = await run()
    return Timed(seconds, {name: read() - before[name] for name, read in readers.items()})


async def tier(port: int, logs: list[PartitionLog], epoch: int = 0) -> float:
    """Seconds from the leadership call until every partition's rolled segments are tiered."""
    client = CopySchedulerClient(f"127.0.0.1:{port}", options=ClientOptions(timeout_s=120))
    try:
        assignments = [
            PartitionAssignment(
                TopicIdPartition(log.topic_id, "bench", int(log.directory.name.rsplit("-", 1)[1])),
                log.directory,
                epoch,
            )
            for log in logs
        ]
        began = time.perf_counter()
        await client.on_partition_leadership_changes(assignments)
        pending = {a.topic_id_partition: a.log_dir for a in assignments}
        ends = {
            a.topic_id_partition: log.active_segment.base_offset - 1
            for a, log in zip(assignments, logs, strict=True)
        }
        # One partition asked at a time (they progress together): polling all of
        # them every 50 ms would cost the scheduler more CPU than the copies do.
        while pending:
            tip = next(iter(pending))
            state = await client.partition_state(tip)
            if state.highest_tiered_offset == ends[tip]:
                del pending[tip]
            else:
                await asyncio.sleep(0.05)
        return time.perf_counter() - began
    finally:
        await client.close()


async def tier_once(
    path: Path,
    properties: dict[str, str],
    logs: list[PartitionLog],
    others: dict[str, int],
) -> Timed:
    """How long a scheduler started with `properties` takes to tier `logs`, and the CPU
    of it and `others` meanwhile (not its start-up's); it is stopped after."""
    scheduler, port = serve("copy-scheduler", path, properties)
    try:
        return await timed(
            lambda: tier(port, logs), cpu_readers({"copy-scheduler": scheduler.pid, **others})
        )
    finally:
        scheduler.terminate()
        scheduler.wait()


async def idle_cpu(
    report: Report,
    name: str,
    logs: list[PartitionLog],
    work: Path,
    properties: dict[str, str],
    processes: list[subprocess.Popen[str]],
    others: dict[str, int],
) -> None:
    """CPU per task interval of a scheduler whose partitions are all tiered up to date."""
    scheduler, port = serve("copy-scheduler", work / f"{name}.properties", properties)
    processes.append(scheduler)
    began = time.perf_counter()
    await tier(port, logs)  # registered, each has run, every rolled segment is tiered
    registration_s = time.perf_counter() - began
    await asyncio.sleep(IDLE_INTERVAL_S)
    # Over LISTING_MAX_USES intervals: one round of the periodic listings is included.
    pids = {"scheduler": scheduler.pid, **others}
    cpu_before = {process: tree_cpu_seconds(pid) for process, pid in pids.items()}
    wall_before = time.perf_counter()
    await asyncio.sleep(LISTING_MAX_USES * IDLE_INTERVAL_S)
    intervals = (time.perf_counter() - wall_before) / IDLE_INTERVAL_S
    cpu = {process: tree_cpu_seconds(pid) - cpu_before[process] for process, pid in pids.items()}
    report.info(
        f"{name}_{len(logs)}_partitions",
        cpu_s_per_interval=round(cpu["scheduler"] / intervals, 2),
        metadata_manager_cpu_s_per_interval=round(cpu["metadata_manager"] / intervals, 2),
        interval_s=IDLE_INTERVAL_S,
        core_percent=round(100 * cpu["scheduler"] / (intervals * IDLE_INTERVAL_S), 1),
        registration_s=round(registration_s, 1),
    )
    scheduler.terminate()
    scheduler.wait()
    processes.remove(scheduler)


async def main() -> None:
    segment_bytes = int(sys.argv[1]) * MIB if len(sys.argv) > 1 else 4 * MIB
    report = Report("copy_scheduler")
    with bench_stack("copy") as (work, processes, broker):
        moto, line = start(s3_server_command(), "PORT")
        processes.append(moto)
        endpoint = f"http://127.0.0.1:{line.split()[1]}"
        logs = write_partitions(work / "kafka-logs", PARTITIONS, SEGMENTS, segment_bytes)
        total = sum(s.size for log in logs for s in log.segments[:-1])
        bucket = "bench-tiered"
        await empty_bucket(endpoint, bucket, create=True)
        storage = {
            "storage.backend": "s3",
            "storage.s3.bucket.name": bucket,
            "storage.s3.endpoint.url": endpoint,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": "test",
            "storage.aws.secret.access.key": "test",
        }
        store_socket = work / "store.sock"
        store, store_port = serve(
            "segment-store",
            work / "store.properties",
            {
                "listen.address": "127.0.0.1:0",
                "short.circuit.socket.path": str(store_socket),
                **storage,
            },
        )
        processes.append(store)
        metadata, metadata_port = serve_metadata_manager(work, broker.bootstrap_servers)
        processes.append(metadata)
        scheduler_properties = {
            "listen.address": "127.0.0.1:0",
            "segment.store.address": f"127.0.0.1:{store_port}",
            "metadata.manager.address": f"127.0.0.1:{metadata_port}",
            # remote.log.manager.task.interval.ms stays Kafka's 30 s: a partition's
            # first run copies all its rolled segments, and a shorter interval only
            # adds runs of partitions already done (at 200 ms, 500 runs a second:
            # a sixth of the scheduler's CPU while copying, timed as copying).
            "remote.log.manager.copier.thread.pool.size": str(COPIERS),
            "log.local.retention.ms": "-1",
            "log.retention.ms": "-1",
        }
        short_properties = {
            **scheduler_properties,
            "segment.store.short.circuit.socket.path": str(store_socket),
        }
        # Direct storage writes: the segment store in the scheduler's process.
        direct_properties = {
            **scheduler_properties,
            **storage,
            "remote.log.manager.direct.storage.write.enabled": "true",
        }
        modes = {
            "service": scheduler_properties,
            "short": short_properties,
            "direct": direct_properties,
        }
        others = {"segment-store": store.pid, "metadata-manager": metadata.pid, "s3": moto.pid}

        await empty_bucket(endpoint, "bench-bare", create=True)

        async def bare() -> Timed:
            await empty_bucket(endpoint, "bench-bare")
            return await timed(
                lambda: bare_upload(endpoint, "bench-bare", logs), cpu_readers({"s3": moto.pid})
            )

        def tiering(mode: str, properties: dict[str, str]) -> Callable[[], Awaitable[Timed]]:
            tries = itertools.count()

            async def run() -> Timed:
                # Fresh partitions (new topic ids) each time, onto an emptied bucket.
                logs_dir = work / f"{mode}-logs-{next(tries)}"
                fresh = write_partitions(logs_dir, PARTITIONS, SEGMENTS, segment_bytes)
                try:
                    return await tier_once(work / f"{mode}.properties", properties, fresh, others)
                finally:
                    await empty_bucket(endpoint, bucket)
                    shutil.rmtree(logs_dir)

            return run

        # Rounds interleave the bare upload and the three modes, in an order rotated
        # each round; each figure is the median of its per-round ratios. (With the
        # faster of two tries each, a stall of the shared machine, up to a second of
        # the three or four, fell on one side only.)
        rounds = await interleaved_async(
            {"bare": bare, **{mode: tiering(mode, props) for mode, props in modes.items()}},
            lambda t: {mode: t["bare"] / t[mode] for mode in modes},
            plan=RoundPlan(warmup_rounds=1, min_rounds=5, max_rounds=11),
        )
        mb_per_s = {
            name: round(total / 1e6 / statistics.median(times))
            for name, times in rounds.times.items()
        }
        report.info(
            "copy_mb_per_s",
            **mb_per_s,
            partitions=PARTITIONS,
            segment_mib=segment_bytes // MIB,
        )
        print(f"copy MB/s (median rounds of {len(rounds.ratios['service'])}): {mb_per_s}")
        for name in rounds.times:
            print(f"  {name}: " + rounds.cpu_line(name, "GB", total / 1e9))
        for mode, figure in (
            ("service", "copy_50_partitions"),
            ("short", "copy_50_partitions_short_circuit"),
            ("direct", "copy_50_partitions_direct_storage_write"),
        ):
            report.ratio_rounds(figure, rounds.ratios[mode], 0.8)

        scheduler_properties["remote.log.manager.task.interval.ms"] = str(IDLE_INTERVAL_S * 1000)
        scheduler_properties["log.retention.ms"] = str(7 * 86_400_000)  # nothing expires
        pids = {"metadata_manager": metadata.pid}
        # Nothing tiered, nothing to copy (an empty active segment each).
        idle_logs = write_partitions(work / "idle-logs", IDLE_PARTITIONS, 0, 0)
        await idle_cpu(report, "idle", idle_logs, work, scheduler_properties, processes, pids)
        # Realistic idle partitions: a tiered segment each, to keep by retention.
        tiered_logs = write_partitions(work / "tiered-logs", IDLE_TIERED_PARTITIONS, 1, 256 * 1024)
        await idle_cpu(
            report, "idle_tiered", tiered_logs, work, scheduler_properties, processes, pids
        )
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
