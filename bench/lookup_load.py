"""Metadata lookups (GetRemoteLogSegmentMetadata) on an idle and on a loaded machine.

The plugin's `client.lookup.timeout.ms` bounds the lookups of Kafka's remote fetches
and of isReady: short, so a hung manager fails a fetch instead of holding a reader
thread; long enough that a busy manager never does. This measures what a lookup takes
through gRPC from a client in another process, the manager in its own (as in
production), first with the machine idle, then with every core busy: twice as many
spinning processes as cores, and 16 clients looking up at once. The ratio is the
loaded p99.9 over the idle one; the figures are the ones to set the default by.
Run: .venv/bin/python bench/lookup_load.py [lookups per client, default 2000]
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import sys
import tempfile
import uuid
from pathlib import Path

from common import Report
from metadata import WRITE_SEGMENTS, WRITERS, config_file, copied, segment, serve, timed_lookups

from remotelog.client import ClientOptions, MetadataClient
from remotelog.core.model import TopicIdPartition
from remotelog.dev.broker import EmbeddedBroker

CLIENTS = 16


def spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


async def lookups(port: int, tips: list[TopicIdPartition], count: int, seed: int) -> list[float]:
    """`count` lookups one after another by one client of its own; each one's ms."""
    async with MetadataClient(f"127.0.0.1:{port}", options=ClientOptions(timeout_s=60)) as c:
        return await timed_lookups(c, tips, count, random.Random(seed))


def percentiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def at(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))], 2)

    return {"p50": at(0.5), "p99": at(0.99), "p999": at(0.999), "max": round(ordered[-1], 2)}


async def measured(port: int, tips: list[TopicIdPartition], count: int) -> dict[str, float]:
    per_client = await asyncio.gather(
        *(asyncio.to_thread(asyncio.run, lookups(port, tips, count, n)) for n in range(CLIENTS))
    )
    return percentiles([ms for client in per_client for ms in client])


async def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    report = Report("lookup_load")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        process, port = serve(config_file(Path(tmp), broker.bootstrap_servers, "lookups"))
        try:
            options = ClientOptions(timeout_s=60)
            async with MetadataClient(f"127.0.0.1:{port}", options=options) as c:
                tips = [TopicIdPartition(uuid.uuid4(), "bench", p) for p in range(WRITERS)]
                await c.on_partition_leadership_changes(tips)
                for tip in tips:
                    for number in range(WRITE_SEGMENTS // WRITERS):
                        metadata = segment(tip, number)
                        await c.add_remote_log_segment_metadata(metadata)
                        await c.update_remote_log_segment_metadata(copied(metadata))
            idle = await measured(port, tips, count)
            spawning = multiprocessing.get_context("spawn")  # no fork of gRPC's threads
            stop = spawning.Event()
            spinners = [
                spawning.Process(target=spin, args=(stop,))
                for _ in range(2 * (os.cpu_count() or 1))
            ]
            for spinner in spinners:
                spinner.start()
            try:
                loaded = await measured(port, tips, count)
            finally:
                stop.set()
                for spinner in spinners:
                    spinner.join()
        finally:
            process.terminate()
            process.wait(timeout=30)
    report.info("lookup_ms_idle", clients=CLIENTS, calls=CLIENTS * count, **idle)
    report.info("lookup_ms_loaded", clients=CLIENTS, calls=CLIENTS * count, **loaded)
    report.ratio("lookup_p999_loaded_vs_idle", loaded["p999"] / idle["p999"], None)
    for figure in report.figures:
        print(figure, file=sys.stderr)
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
