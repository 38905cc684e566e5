"""What the slowest 1% of random 1 MiB Fetches wait on (issue 35).

The partition and services of bench/fetch.py, one fetch service (direct storage
reads, or the short circuit to the store), 5,000 Fetches at random offsets as
there. Beside each Fetch's latency, over the same interval:
- each process's time on a core and time runnable but waiting for one, from
  the scheduler's own accounting (/proc/<pid>/task/*/schedstat, nanoseconds,
  every thread): the fetch service, this process (the client), and the rest of
  the stack together (store, metadata manager, copy scheduler, Tansu);
- this process's garbage collection pauses (gc.callbacks);
- the fetch service's page faults (major and minor, /proc/<pid>/stat).
It prints the mean of each for the slowest 1% and for the middle tenth
(45th-55th percentile): where the two differ is what the tail waits on.
Run: .venv/bin/python bench/fetch_tail.py [direct|short|store] [MiB per segment, default 64]
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

from common import FETCH_WAYS, bench_stack, serve_fetch, serve_tiering
from copy_scheduler import tier
from fetch import MIB, fetch_latencies, write_partition

from remotelog.client import ClientOptions, RemoteFetchClient
from remotelog.core.model import TopicIdPartition
from remotelog.process.memory import keep_freed_memory


def schedstat(pid: int) -> tuple[int, int]:
    """(ns on a core, ns runnable and waiting) of all of a process's threads."""
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            values = (task / "schedstat").read_text().split()
            run += int(values[0])
            wait += int(values[1])
    return run, wait


def faults(pid: int) -> int:
    """Minor and major page faults of a process so far."""
    values = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(values[7]) + int(values[9])  # minflt, majflt


@dataclass
class Sample:
    """One Fetch: its latency and what happened meanwhile, in milliseconds."""

    latency: float = 0.0
    service_on_core: float = 0.0
    service_waiting: float = 0.0
    client_on_core: float = 0.0
    client_waiting: float = 0.0
    others_on_core: float = 0.0
    client_gc: float = 0.0
    service_faults: float = 0.0


class Probe:
    def __init__(self, service: int, others: list[int]) -> None:
        self.service, self.others = service, others
        self.gc_ms = 0.0
        self._gc_began = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self.gc_ms += (time.perf_counter() - self._gc_began) * 1000

    def read(self) -> tuple[float, ...]:
        service, client = schedstat(self.service), schedstat(os.getpid())
        others = sum(schedstat(pid)[0] for pid in self.others)
        return (
            *(ns / 1e6 for ns in (*service, *client, others)),
            self.gc_ms,
            float(faults(self.service)),
        )


def summary(label: str, band: list[Sample]) -> str:
    means = {f.name: statistics.fmean(getattr(s, f.name) for s in band) for f in fields(Sample)}
    return f"{label} ({len(band)}): " + ", ".join(f"{k} {v:.2f}" for k, v in means.items())


async def main() -> None:
    keep_freed_memory()
    mode = sys.argv[1] if len(sys.argv) > 1 else "direct"
    if mode not in FETCH_WAYS:
        sys.exit(f"fetch_tail.py: the way must be one of {', '.join(FETCH_WAYS)}, not {mode!r}")
    segment_bytes = int(sys.argv[2]) * MIB if len(sys.argv) > 2 else 64 * MIB
    with bench_stack("fetch-tail") as (work, processes, broker):
        log = write_partition(work / "kafka-logs", segment_bytes)
        tip = TopicIdPartition(log.topic_id, "bench", 0)
        addresses, scheduler_port = serve_tiering(work, broker.bootstrap_servers, processes)
        await tier(scheduler_port, [log])
        others = [p.pid for p in processes] + ([broker.pid] if broker.pid else [])
        fetch, port = serve_fetch(work, addresses, processes, mode)
        client = RemoteFetchClient(f"127.0.0.1:{port}", options=ClientOptions(timeout_s=60))
        try:
            probe = Probe(fetch.pid, others)
            samples = [
                Sample(latency, *changes)
                for latency, changes in await fetch_latencies(
                    client, tip, log.log_end_offset, probe.read
                )
            ]
        finally:
            await client.close()
    samples.sort(key=lambda s: s.latency)
    n = len(samples)
    print(
        f"{mode}: {n} Fetches, p50 {samples[n // 2].latency:.2f} ms, "
        f"p99 {samples[int(n * 0.99)].latency:.2f} ms (all figures in ms but faults)"
    )
    print(summary("middle tenth", samples[int(n * 0.45) : int(n * 0.55)]))
    print(summary("slowest 1%", samples[int(n * 0.99) :]))


if __name__ == "__main__":
    asyncio.run(main())
