"""Shared output of the benchmarks: one line per figure, then a JSON result file."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
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

    def ratio_rounds(
        self, figure: str, ratios: list[float], target: float | None, **detail: float
    ) -> None:
        """The median of per-round ratios, with their spread."""
        self.ratio(
            figure,
            statistics.median(ratios),
            target,
            min=round(min(ratios), 3),
            max=round(max(ratios), 3),
            rounds=len(ratios),
            **detail,
        )

    def latency(self, figure: str, value_ms: float, max_ms: float, **detail: float) -> None:
        self.figures.append(
            {"name": figure, "value_ms": round(value_ms, 3), "max_ms": max_ms, **detail}
        )

    def memory(self, figure: str, value_mib: float, max_mib: float, **detail: float) -> None:
        self.figures.append(
            {"name": figure, "value_mib": round(value_mib, 1), "max_mib": max_mib, **detail}
        )

    def info(self, figure: str, **values: float) -> None:
        self.figures.append({"name": figure, **values})

    def finish(self) -> None:
        for f in self.figures:
            if "ratio" in f:
                target = "none" if f["target"] is None else f["target"]
                spread = ""
                if "min" in f:
                    spread = f" min={f['min']} max={f['max']} rounds={f['rounds']}"
                print(f"{f['name']} ratio={f['ratio']} target={target}{spread}")
            elif "value_ms" in f:
                print(f"{f['name']} value_ms={f['value_ms']} max_ms={f['max_ms']}")
            elif "value_mib" in f:
                print(f"{f['name']} value_mib={f['value_mib']} max_mib={f['max_mib']}")
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


@contextlib.contextmanager
def kept_on_failure(prefix: str, what: str) -> Iterator[Path]:
    """A new work directory: removed once the block ends well, kept and named (with
    `what` it holds) when it fails, to be read."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    except BaseException:
        print(f"kept {work} ({what})", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)


def best_of(runs: int, fn) -> float:  # type: ignore[no-untyped-def]
    """Fastest wall time of `runs` calls, in seconds (the least disturbed run)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of a live process, all its threads, ended ones too, to the
    nanosecond: its process-wide CPU clock (Linux's CPUCLOCK_SCHED of a pid, what
    clock_getcpuclockid(3) returns). /proc/<pid>/stat counts in 10 ms ticks, too
    coarse for a 64 MiB transfer of 30-100 ms, and summing each live thread's
    /proc/<pid>/task/*/schedstat misses the threads that have ended (moto's, one
    a request). 0 once the process is gone."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return 0.0


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and all its descendants, the exited ones included:
    each live process's own (process_cpu_seconds) and its reaped children's
    ticks, so every process is counted once."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # Fields after the command name, which may hold spaces: state is [0].
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            # cutime, cstime: fields 16-17 of /proc/<pid>/stat.
            reaped = sum(int(v) for v in stats[current][13:15]) / tick
            total += process_cpu_seconds(current) + reaped
        todo.extend(children.get(current, []))
    return total


def cpu_of(pid: int) -> Callable[[], float]:
    """A reader of the CPU seconds of process `pid` and its descendants."""
    return lambda: tree_cpu_seconds(pid)


def own_cpu() -> float:
    """CPU seconds of this process alone (its threads, not its children)."""
    return time.process_time()


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """How many rounds `interleaved_async` runs: `warmup_rounds` untimed first, then
    from `min_rounds` to `max_rounds`, stopping once every median ratio is known to
    within `tolerance` (relative): its 95% confidence interval (`median_interval`)
    is no wider than the median times 1 +- `tolerance`."""

    warmup_rounds: int = 2
    min_rounds: int = 7
    max_rounds: int = 15
    tolerance: float = 0.05
    # A contender faster than this runs as many times in a row as make it up, and
    # counts per run: a page-cached 64 MiB read takes 3 ms, a timer's noise.
    min_round_s: float = 0.0


def median_interval(values: list[float]) -> tuple[float, float] | None:
    """A 95% confidence interval of the median of the distribution `values` are drawn
    from, whatever that distribution: the order statistics j and n + 1 - j, j the
    largest rank with P(Binomial(n, 1/2) < j) <= 2.5%. None below 6 values, when
    even (min, max) covers the median with less than 95%.

    A stopping rule on this, unlike one on how far the median moved over the
    last rounds, does not stop early by luck.
    """
    n = len(values)
    below, rank = 0, 0
    while (below + math.comb(n, rank)) / 2**n <= 0.025:
        below += math.comb(n, rank)
        rank += 1
    if rank == 0:
        return None
    ordered = sorted(values)
    return ordered[rank - 1], ordered[n - rank]


def p99(ordered: list[float]) -> float:
    """The 99th percentile of `ordered` (sorted, not empty): the value 1% lie above."""
    return ordered[int(len(ordered) * 0.99)]


def settled(values: list[float], tolerance: float) -> bool:
    """Whether the median of `values` is known to within `tolerance` (relative)."""
    interval = median_interval(values)
    if interval is None:
        return False
    median = statistics.median(values)
    return median * (1 - tolerance) <= interval[0] and interval[1] <= median * (1 + tolerance)


ROUNDS = RoundPlan()
PAIR_ROUNDS = RoundPlan(warmup_rounds=1)


@dataclasses.dataclass(frozen=True)
class Timed:
    """What a contender of `interleaved_async` may return when part of its run is set-up
    (fresh input, a process started): the seconds and CPU of the part measured."""

    seconds: float
    cpu: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Rounds:
    """What `interleaved` measured: each contender's wall times, each figure's
    per-round ratios, and per contender the CPU seconds of each watched process."""

    times: dict[str, list[float]]
    ratios: dict[str, list[float]]
    cpu: dict[str, dict[str, list[float]]]

    def cpu_line(self, contender: str, per: str, amount: float) -> str:
        """Median CPU seconds of each watched process per `per` (e.g. GB), one run."""
        return (
            ", ".join(
                f"{process} {statistics.median(seconds) / amount:.2f}"
                for process, seconds in self.cpu[contender].items()
            )
            + f" CPU s per {per}"
        )


def interleaved(
    contenders: dict[str, Callable[[], object]],
    ratios: Callable[[dict[str, float]], dict[str, float]],
    *,
    watch: dict[str, Callable[[], float]] | None = None,
    plan: RoundPlan = ROUNDS,
) -> Rounds:
    """`interleaved_async` for contenders that are plain calls (the Spark jobs)."""

    def awaitable(call: Callable[[], object]) -> Callable[[], Awaitable[object]]:
        async def run() -> object:
            return call()

        return run

    return asyncio.run(
        interleaved_async(
            {name: awaitable(call) for name, call in contenders.items()},
            ratios,
            watch=watch,
            plan=plan,
        )
    )


async def interleaved_async(
    contenders: dict[str, Callable[[], Awaitable[object]]],
    ratios: Callable[[dict[str, float]], dict[str, float]],
    *,
    watch: dict[str, Callable[[], float]] | None = None,
    plan: RoundPlan = ROUNDS,
    tidy: Callable[[], Awaitable[object]] | None = None,
) -> Rounds:
    """Wall times of the contenders and the ratios `ratios` makes of each round's.

    A round runs every contender once, in an order rotated from round to round, so
    a slow spell of the machine falls on all of them alike rather than on whichever
    ran then. A contender that returns `Timed` says itself what counts of its run.
    Rounds go on until every ratio's median is known to within `plan.tolerance`
    (`settled`), or `plan.max_rounds` were run. `watch` names the processes whose
    CPU each run is measured, each by a reader of its CPU seconds
    (`tree_cpu_seconds`). First, `warmup_rounds` untimed rounds: a JVM's
    compiler and a process's allocator take a few runs to settle, and a figure is
    of the steady state a long job sees. `tidy`, untimed, after each round: what
    the rounds leave behind (copies) would otherwise grow the state each meets.
    """
    names = list(contenders)
    repeats = dict.fromkeys(names, 1)
    for _ in range(plan.warmup_rounds):
        for name, contender in contenders.items():
            began = time.perf_counter()
            result = await contender()
            took = time.perf_counter() - began
            if not isinstance(result, Timed):  # with set-up to leave out: never repeated
                repeats[name] = max(1, math.ceil(plan.min_round_s / max(took, 1e-6)))
    watch = watch or {}
    rounds = Rounds({name: [] for name in names}, {}, {name: {} for name in names})
    for round_ in range(plan.max_rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            cpu_before = {process: read() for process, read in watch.items()}
            began = time.perf_counter()
            for _ in range(repeats[name]):
                result = await contenders[name]()
            took = (time.perf_counter() - began) / repeats[name]
            used = {
                process: (read() - cpu_before[process]) / repeats[name]
                for process, read in watch.items()
            }
            if isinstance(result, Timed):
                took, used = result.seconds, used | result.cpu
            rounds.times[name].append(took)
            for process, seconds in used.items():
                rounds.cpu[name].setdefault(process, []).append(seconds)
        for figure, ratio in ratios({name: rounds.times[name][-1] for name in names}).items():
            rounds.ratios.setdefault(figure, []).append(ratio)
        if tidy is not None:
            await tidy()
        if round_ + 1 >= plan.min_rounds and all(
            settled(r, plan.tolerance) for r in rounds.ratios.values()
        ):
            break
    return rounds


# Object storage's link in front of moto (tests/support/s3_server.py's Link): "on" for
# its defaults (50 ms to the first byte, 50 MB/s each way), or its settings, e.g.
# "first_byte_ms=20,bandwidth_mb_s=100,slow_down_fraction=0.01"; unset: the loopback.
S3_LINK_ENV = "BENCH_S3_LINK"
ROOT = Path(__file__).resolve().parents[1]


def s3_server_command(link_by_default: bool = False) -> list[str]:
    """moto's S3 server, over the link BENCH_S3_LINK names (printed, so runs compare);
    unset, over none or, `link_by_default`, over the link's defaults."""
    command = [sys.executable, str(ROOT / "tests" / "support" / "s3_server.py")]
    link = os.environ.get(S3_LINK_ENV, "").strip() or ("on" if link_by_default else "")
    if not link:
        return command
    settings = [] if link == "on" else [s.strip() for s in link.split(",") if s.strip()]
    flags = []
    for setting in settings:
        name, _, value = setting.partition("=")
        if not value:
            raise SystemExit(f"{S3_LINK_ENV}: {setting!r} is not name=value")
        flags.append(f"--{name.strip().replace('_', '-')}={value.strip()}")
    print(f"S3 over a link: {link} ({S3_LINK_ENV})", flush=True)
    return [*command, "--link", *flags]


def create_bucket(endpoint: str, bucket: str) -> None:
    """A bucket on the S3 server at `endpoint` (moto takes an unsigned PUT)."""
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
    urllib.request.urlopen(request, timeout=10).read()


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


def serve_metadata_manager(
    work: Path,
    bootstrap_servers: str,
    listen: str = "127.0.0.1:0",
    replication_factor: int = 1,
    **settings: str,
) -> tuple[subprocess.Popen[str], int]:
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
            "listen.address": listen,
            "bootstrap.servers": bootstrap_servers,
            "remote.log.metadata.topic.replication.factor": str(replication_factor),
            "remote.log.metadata.snapshot.dir": str(work / "snapshots"),
            **settings,
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


# The fetch service's ways to serve_tiering's segments: through the store's gRPC
# stream, reading the files itself, or by the store's short circuit.
FETCH_WAYS: dict[str, Callable[[Path], dict[str, str]]] = {
    "store": lambda work: {},
    "direct": lambda work: {
        "remote.fetch.direct.storage.read.enabled": "true",
        "storage.root": str(work / "segments"),
    },
    "short": lambda work: {"segment.store.short.circuit.socket.path": str(work / "store.sock")},
}


def serve_fetch(
    work: Path,
    addresses: dict[str, str],
    processes: list[subprocess.Popen[str]],
    way: str = "short",
) -> tuple[subprocess.Popen[str], int]:
    """A remote-fetch process beside serve_tiering's services, reading the segments
    `way` (FETCH_WAYS), with an index cache of its own; the process (also in
    `processes`) and its port."""
    fetch, port = serve(
        "remote-fetch",
        work / f"fetch-{way}.properties",
        {
            "listen.address": "127.0.0.1:0",
            "remote.log.index.file.cache.dir": str(work / f"index-cache-{way}"),
            **addresses,
            **FETCH_WAYS[way](work),
        },
    )
    processes.append(fetch)
    return fetch, port


async def interleaved_pair(
    measured: Callable[[], Awaitable[object]],
    baseline: Callable[[], Awaitable[object]],
    *,
    watch: dict[str, Callable[[], float]] | None = None,
    plan: RoundPlan = PAIR_ROUNDS,
    tidy: Callable[[], Awaitable[object]] | None = None,
) -> Rounds:
    """`interleaved_async` of two: "measured" and "baseline" alternate, first one then
    the other; the figure "ratio" is baseline / measured (above 1: measured is faster)."""
    return await interleaved_async(
        {"measured": measured, "baseline": baseline},
        lambda t: {"ratio": t["baseline"] / t["measured"]},
        watch=watch,
        plan=plan,
        tidy=tidy,
    )
