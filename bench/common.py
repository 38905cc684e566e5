"""Shared output of the benchmarks: one line per figure, then a JSON result file."""

from __future__ import annotations

import contextlib
import json
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from remotelog.dev.broker import EmbeddedBroker
from remotelog.rpc.serve import serve_command

RESULTS = Path(__file__).resolve().parent / "results"


class Report:
    def __init__(self, name: str) -> None:
        self.name = name
        self.figures: list[dict[str, object]] = []

    def ratio(self, figure: str, ratio: float, target: float | None, **detail: float) -> None:
        """A ratio against a baseline of the same run; target None = reported only."""
        self.figures.append({"name": figure, "ratio": round(ratio, 3), "target": target, **detail})

    def latency(self, figure: str, value_ms: float, max_ms: float) -> None:
        self.figures.append({"name": figure, "value_ms": round(value_ms, 3), "max_ms": max_ms})

    def info(self, figure: str, **values: float) -> None:
        self.figures.append({"name": figure, **values})

    def finish(self) -> None:
        for f in self.figures:
            if "ratio" in f:
                target = "none" if f["target"] is None else f["target"]
                print(f"{f['name']} ratio={f['ratio']} target={target}")
            elif "value_ms" in f:
                print(f"{f['name']} value_ms={f['value_ms']} max_ms={f['max_ms']}")
        RESULTS.mkdir(exist_ok=True)
        result = {
            "benchmark": self.name,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "figures": self.figures,
        }
        (RESULTS / f"{self.name}.json").write_text(json.dumps(result, indent=2) + "\n")


@contextlib.contextmanager
def bench_stack(
    name: str,
) -> Iterator[tuple[Path, list[subprocess.Popen[str]], EmbeddedBroker]]:
    """A work directory, a list for the processes the benchmark starts and an embedded
    broker (Tansu); at the end the processes are stopped, the broker too, and the
    work directory removed."""
    work = Path(tempfile.mkdtemp(prefix=f"remotelog-bench-{name}-"))
    processes: list[subprocess.Popen[str]] = []
    broker = EmbeddedBroker(log_path=work / "tansu.log")
    try:
        broker.start()
        yield work, processes, broker
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def best_of(runs: int, fn) -> float:  # type: ignore[no-untyped-def]
    """Fastest wall time of `runs` calls, in seconds (the least disturbed run)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def start(command: list[str], marker: str) -> tuple[subprocess.Popen[str], str]:
    """Start a process; return it with the first output line containing `marker`.

    The rest of its output is drained in a thread: a process blocked on a full
    pipe would stall the benchmark.
    """
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if marker in line:
            threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, line.strip()
    raise RuntimeError(f"{command[0]} exited before printing {marker!r}")


def serve(
    service: str, path: Path, properties: dict[str, str]
) -> tuple[subprocess.Popen[str], int]:
    """`remotelog serve <service>` with `properties` written to `path`; the process and its port."""
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    process, line = start(serve_command(service, path), "serving on")
    return process, int(line.rsplit(":", 1)[1])


def serve_metadata_manager(work: Path, bootstrap_servers: str) -> tuple[subprocess.Popen[str], int]:
    """A metadata manager on the benchmark's broker, its snapshots under `work`.

    Its consumer polls at the service's default wait (100 ms). Its own writes
    do not wait for a poll (applied once acknowledged, in offset order); a
    metadata partition newly assigned is ready after one, as on Kafka, whose
    fetch of a partition with nothing new also lasts its max wait. (It polled
    every 10 ms while writes waited for their own records: Tansu answers a
    fetch only when its wait ends. That cost Tansu about 12% of a core.)
    """
    return serve(
        "metadata-manager",
        work / "metadata.properties",
        {
            "listen.address": "127.0.0.1:0",
            "bootstrap.servers": bootstrap_servers,
            "remote.log.metadata.topic.replication.factor": "1",
            "remote.log.metadata.snapshot.dir": str(work / "snapshots"),
        },
    )


def serve_tiering(
    work: Path, bootstrap_servers: str, processes: list[subprocess.Popen[str]]
) -> tuple[dict[str, str], int]:
    """A filesystem segment store (short circuit at `work`/store.sock), a metadata
    manager and a copy scheduler that keeps local segments, added to `processes`:
    the addresses other services are given, and the scheduler's port."""
    store, store_port = serve(
        "segment-store",
        work / "store.properties",
        {
            "listen.address": "127.0.0.1:0",
            "storage.backend": "filesystem",
            "storage.root": str(work / "segments"),
            "short.circuit.socket.path": str(work / "store.sock"),
        },
    )
    processes.append(store)
    metadata, metadata_port = serve_metadata_manager(work, bootstrap_servers)
    processes.append(metadata)
    addresses = {
        "segment.store.address": f"127.0.0.1:{store_port}",
        "metadata.manager.address": f"127.0.0.1:{metadata_port}",
    }
    scheduler, scheduler_port = serve(
        "copy-scheduler",
        work / "scheduler.properties",
        {"listen.address": "127.0.0.1:0", "log.local.retention.ms": "-1", **addresses},
    )
    processes.append(scheduler)
    return addresses, scheduler_port
