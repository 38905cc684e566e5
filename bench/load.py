"""Load: CLIENTS concurrent clients doing random 1 MiB Fetches against one fetch service.

One partition of 4 x 64 MiB segments is tiered into the filesystem segment store as in
bench/fetch.py; one remote-fetch process (short circuit to the store, Kafka's reader
defaults: 10 threads, 100 pending tasks) serves CLIENTS clients, each on its own
channel (in CLIENT_PROCESSES processes), each sending one Fetch after another (random
offset, 1 MiB) for DURATION_S. The calls go through the raw gRPC stub, so every
refusal is seen, not retried.

What must hold: the only refusals are READER_QUEUE_FULL (RESOURCE_EXHAUSTED), there
is no other error of any kind, and the service's anonymous memory (RssAnon: its heap,
not the page cache it maps) stays under MEMORY_BOUND_MIB. Reported: fetches and
refusals per second, p50 and p99 of the answered Fetches, the largest RssAnon.
Run: .venv/bin/python bench/load.py [seconds, default 60] [clients, default 200]
"""

from __future__ import annotations

import asyncio
import collections
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import grpc
from common import Report, bench_stack, p99, serve_fetch, serve_tiering
from copy_scheduler import tier
from fetch import MIB, write_partition

from remotelog.api.fetch.v1 import remote_fetch_pb2 as pb
from remotelog.api.fetch.v1 import remote_fetch_pb2_grpc as pb_grpc
from remotelog.api.type.v1 import error_pb2
from remotelog.core.model import TopicIdPartition
from remotelog.process.memory import keep_freed_memory
from remotelog.protocol.convert import topic_id_partition_to_proto

CLIENTS = 200
DURATION_S = 60.0
MEMORY_BOUND_MIB = 512
CLIENT_PROCESSES = 2
SAMPLE_EVERY_S = 0.25


def rss_anon_mib(pid: int) -> float:
    """The process's anonymous resident memory (heap, not mapped files), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no RssAnon for pid {pid}")


class Tally:
    """Every call's outcome: answered (with latency), expired empty, or refused, by why."""

    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.expired = 0
        self.outcomes: collections.Counter[str] = collections.Counter()

    def refused(self, why: str) -> None:
        self.outcomes[why] += 1


async def client(
    address: str, tip: TopicIdPartition, end: int, until: float, tally: Tally, seed: int
) -> None:
    rng = random.Random(seed)
    partition = topic_id_partition_to_proto(tip)
    async with grpc.aio.insecure_channel(
        address, options=[("grpc.max_receive_message_length", 16 * MIB)]
    ) as channel:
        stub = pb_grpc.RemoteFetchServiceStub(channel)
        while time.time() < until:
            request = pb.FetchRequest(
                partitions=[
                    pb.FetchPartition(
                        topic_id_partition=partition,
                        fetch_offset=rng.randrange(0, end),
                        partition_max_bytes=MIB,
                    )
                ],
                max_bytes=MIB,
                min_one_message=True,
            )
            began = time.perf_counter()
            try:
                response = await stub.Fetch(request, timeout=30)
            except grpc.aio.AioRpcError as error:
                tally.refused(f"call {error.code().name}: {error.details()[:60]}")
                continue
            (result,) = response.partitions
            if result.error_reason:
                tally.refused(f"partition {pb_reason(result.error_reason)}")
            elif not result.records:
                tally.expired += 1
            else:
                tally.latencies_ms.append((time.perf_counter() - began) * 1000)


def pb_reason(value: int) -> str:
    return error_pb2.ErrorReason.Name(value)


def client_process(
    address: str, tip: TopicIdPartition, end: int, until: float, seeds: range
) -> Tally:
    """Clients `seeds` in a process of their own: one process's event loop cannot
    receive 200 clients' megabytes fast enough to load the service."""
    keep_freed_memory()
    tally = Tally()

    async def run() -> None:
        await asyncio.gather(*(client(address, tip, end, until, tally, s) for s in seeds))

    asyncio.run(run())
    return tally


async def sample_memory(pid: int, until: float, samples: list[float]) -> None:
    while time.time() < until:
        samples.append(rss_anon_mib(pid))
        await asyncio.sleep(SAMPLE_EVERY_S)


async def main() -> None:
    keep_freed_memory()
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else DURATION_S
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else CLIENTS
    report = Report("load")
    with bench_stack("load") as (work, processes, broker):
        log = write_partition(work / "kafka-logs", 64 * MIB)
        tip = TopicIdPartition(log.topic_id, "bench", 0)
        addresses, scheduler_port = serve_tiering(work, broker.bootstrap_servers, processes)
        await tier(scheduler_port, [log])
        fetch, port = serve_fetch(work, addresses, processes)
        memory_before = rss_anon_mib(fetch.pid)
        memory = [memory_before]
        end = log.segments[-1].base_offset
        began = time.monotonic()
        until = time.time() + duration_s
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(CLIENT_PROCESSES) as pool:
            shares = [range(n, clients, CLIENT_PROCESSES) for n in range(CLIENT_PROCESSES)]
            tallies = await asyncio.gather(
                *(
                    loop.run_in_executor(
                        pool, client_process, f"127.0.0.1:{port}", tip, end, until, share
                    )
                    for share in shares
                ),
                sample_memory(fetch.pid, until, memory),
            )
        tally = Tally()
        for part in tallies[:-1]:
            assert isinstance(part, Tally)
            tally.latencies_ms += part.latencies_ms
            tally.expired += part.expired
            tally.outcomes += part.outcomes
        elapsed = time.monotonic() - began
        alive = fetch.poll() is None

    answered = len(tally.latencies_ms)
    queue_full = sum(n for why, n in tally.outcomes.items() if "READER_QUEUE_FULL" in why)
    others = {why: n for why, n in tally.outcomes.items() if "READER_QUEUE_FULL" not in why}
    latencies = sorted(tally.latencies_ms)
    p50 = statistics.median(latencies) if latencies else float("nan")
    tail = p99(latencies) if latencies else float("nan")
    print(
        f"{clients} clients for {elapsed:.0f} s: {answered / elapsed:,.0f} Fetches/s answered, "
        f"{queue_full / elapsed:,.0f}/s refused READER_QUEUE_FULL, {tally.expired} expired empty; "
        f"p50 {p50:.1f} ms, p99 {tail:.1f} ms; RssAnon {memory_before:.0f} MiB at start, "
        f"at most {max(memory):.0f} MiB; service alive at the end: {alive}"
    )
    for why, count in sorted(others.items()):
        print(f"  other outcome: {why}: {count}")
    report.info(
        "load, random 1 MiB Fetch",
        clients=clients,
        seconds=round(elapsed, 1),
        answered_per_s=round(answered / elapsed),
        queue_full_per_s=round(queue_full / elapsed),
        expired=tally.expired,
        other_errors=sum(others.values()),
        p50_ms=round(p50, 2),
        p99_ms=round(tail, 2),
        rss_anon_max_mib=round(max(memory)),
    )
    report.memory("load: largest RssAnon of the fetch service", max(memory), MEMORY_BOUND_MIB)
    report.finish()
    if others or not alive or max(memory) > MEMORY_BOUND_MIB:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
