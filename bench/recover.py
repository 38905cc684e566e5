"""`remotelog recover` at scale: segments recovered per second, against listing and reading.

A store is filled with SEGMENTS segments' objects (a manifest, a small log and its
indexes, as the store writes them) across PARTITIONS partitions: 100,000 in a
filesystem store and 10,000 in moto's S3 server (BENCH_S3_LINK adds a link in
front of it). Then, one after the other:
- the contender lists the same keys and reads and parses every manifest, writing
  nothing;
- recovery (the code `remotelog recover` runs) lists, reads, and writes each
  segment through a metadata manager (`remotelog serve metadata-manager`, over
  Tansu) that knows none of them: COPY_SEGMENT_STARTED, then FINISHED, each once
  the manager has checked it against the store's manifest (DescribeLogSegment of a
  `remotelog serve segment-store` over the same storage).

The contender reads as many manifests at a time as recovery does (16). Recovery runs
in a process of its own, which reports its peak memory: once over a topic of a tenth
of the segments, once over the rest, so the memory is measured in the process that
recovers, against the number of segments.

recover_vs_list_and_read (target 0.5): recovery's segments/s over the contender's.
recover_peak_rss_all_vs_tenth (target 1.2 at most): the recovering process's peak
memory over ten times the segments, against a tenth of them: flat, since the listing
is streamed and no partition's segments are kept once it is done.
Run: .venv/bin/python bench/recover.py  (BENCH_FS_SEGMENTS, BENCH_S3_SEGMENTS)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from common import (
    Report,
    bench_stack,
    create_bucket,
    s3_server_command,
    serve,
    serve_metadata_manager,
    start,
)

from remotelog.client import ClientOptions, MetadataClient
from remotelog.core.config import load_config
from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.tasks import bounded_gather, read_ahead
from remotelog.recovery.config import RecoverConfig
from remotelog.recovery.rebuild import Recovery
from remotelog.segmentstore.backend import ObjectStore
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.layout import IndexRange, Manifest, SegmentFile, SegmentKeys

FS_SEGMENTS = int(os.environ.get("BENCH_FS_SEGMENTS", "100000"))
S3_SEGMENTS = int(os.environ.get("BENCH_S3_SEGMENTS", "10000"))
PARTITIONS = 100
FILLERS = 32
LOG = b"\0" * 512
INDEXES = b"\0" * 64


READS_IN_FLIGHT = Recovery.reads_in_flight
# The topics recovered one after the other: a tenth of the segments, then the rest.
TENTH, REST = "tenth", "rest"


def manifests(segments: int, topic: str) -> list[Manifest]:
    """`segments` segments of 100 offsets each, spread over PARTITIONS partitions."""
    tips = [TopicIdPartition(uuid.uuid4(), topic, p) for p in range(PARTITIONS)]
    found = []
    for number in range(segments):
        tip, n = tips[number % PARTITIONS], number // PARTITIONS
        metadata = RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, uuid.uuid4()),
            n * 100,
            n * 100 + 99,
            1_700_000_000_000 + n,
            1,
            1_700_000_000_000 + n,
            len(LOG),
            ((0, 0),),
        )
        found.append(
            Manifest(metadata, len(LOG), {SegmentFile.OFFSET_INDEX: IndexRange(0, len(INDEXES))})
        )
    return found


async def fill(store: ObjectStore, segments: list[Manifest]) -> None:
    """Each segment's three objects, as a copy leaves them (the manifest last)."""

    async def put(manifest: Manifest) -> None:
        keys = SegmentKeys.of("", manifest.metadata)
        await store.put(keys.log, LOG)
        await store.put(keys.indexes, INDEXES)
        await store.put(keys.manifest, manifest.to_json())

    await bounded_gather((partial(put, m) for m in segments), FILLERS)


async def list_and_read(store: ObjectStore) -> int:
    """The contender: every manifest listed, read (READS_IN_FLIGHT at a time, as recovery
    reads them) and parsed; nothing written."""

    async def reads():
        async for stored in store.list(""):
            if stored.key.endswith(".rsm-manifest"):
                yield asyncio.create_task(store.get(stored.key)), stored.key

    read = 0
    async for fetched, key in read_ahead(reads(), READS_IN_FLIGHT):
        Manifest.from_json(await fetched, key)
        read += 1
    return read


async def timed(what: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    await what()
    return time.perf_counter() - began


def recovered_apart(config: Path, metadata_address: str, topic: str) -> dict[str, float]:
    """Recovery of `topic` in a process of its own: what it wrote, in how long, and its
    peak memory."""
    done = subprocess.run(
        [sys.executable, __file__, "--recover", str(config), metadata_address, topic],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


async def recover_here(config_path: str, metadata_address: str, topic: str) -> None:
    """The recovering process: one line of JSON, its figures."""
    config = load_recover_config(Path(config_path))
    store = await open_backend(config, config.backoff())
    metadata = MetadataClient(metadata_address, options=ClientOptions(timeout_s=30))
    try:
        began = time.perf_counter()
        outcome = await Recovery(store, metadata, "bench", topic=topic).run()
        seconds = time.perf_counter() - began
    finally:
        await metadata.close()
        await store.close()
    print(json.dumps({"written": outcome.segments_missing, "s": seconds, "peak_rss_mib": peak()}))


def peak() -> float:
    """This process's peak resident memory, MiB: VmHWM, which starts again at exec
    (ru_maxrss keeps the parent's peak from before the exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def measure(
    report: Report, name: str, config: Path, metadata_address: str, segments: int
) -> None:
    recover = load_recover_config(config)
    store = await open_backend(recover, recover.backoff())
    try:
        tenth = segments // 10
        await fill(store, manifests(tenth, TENTH) + manifests(segments - tenth, REST))
        listed = await timed(lambda: list_and_read(store))
    finally:
        await store.close()
    small = await asyncio.to_thread(recovered_apart, config, metadata_address, TENTH)
    large = await asyncio.to_thread(recovered_apart, config, metadata_address, REST)
    written = small["written"] + large["written"]
    assert written == segments, f"{name}: wrote {written} of {segments}"
    recovered = small["s"] + large["s"]
    report.ratio(
        f"recover_vs_list_and_read_{name}",
        listed / recovered,
        0.5,
        segments=segments,
        recover_segments_per_s=round(segments / recovered),
        list_and_read_segments_per_s=round(segments / listed),
        recover_s=round(recovered, 1),
    )
    report.ratio(
        f"recover_peak_rss_all_vs_tenth_{name}",
        large["peak_rss_mib"] / small["peak_rss_mib"],
        None,
        segments=segments - tenth,
        peak_rss_mib=round(large["peak_rss_mib"]),
        tenth_segments=tenth,
        tenth_peak_rss_mib=round(small["peak_rss_mib"]),
    )


def recover_config(work: Path, name: str, **storage: str) -> Path:
    path = work / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in storage.items()))
    return path


def load_recover_config(path: Path) -> RecoverConfig:
    config, _ = load_config(RecoverConfig, path, {})
    return config


def checked_by(
    work: Path, name: str, processes: list, bootstrap: str, storage: dict[str, str]
) -> str:
    """A segment store over `storage` and a metadata manager that checks each recovered
    segment against it, as deployed; the manager's address."""
    store, store_port = serve(
        "segment-store",
        work / f"{name}-store.properties",
        {"listen.address": "127.0.0.1:0", **storage},
    )
    processes.append(store)
    (work / name).mkdir()
    manager, port = serve_metadata_manager(
        work / name,
        bootstrap,
        **{"segment.store.address": f"127.0.0.1:{store_port}"},
    )
    processes.append(manager)
    return f"127.0.0.1:{port}"


async def main() -> None:
    report = Report("recover")
    with bench_stack("recover") as (work, processes, broker):
        moto, line = start(s3_server_command(), "PORT")
        processes.append(moto)
        endpoint = f"http://127.0.0.1:{line.split()[1]}"
        storage = {"storage.backend": "filesystem", "storage.root": str(work / "fs")}
        address = checked_by(work, "filesystem", processes, broker.bootstrap_servers, storage)
        filesystem = recover_config(work, "filesystem", **storage)
        await measure(report, "filesystem", filesystem, address, FS_SEGMENTS)
        bucket = f"recover-{uuid.uuid4().hex[:8]}"
        storage = {
            "storage.backend": "s3",
            "storage.s3.bucket.name": bucket,
            "storage.s3.endpoint.url": endpoint,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": "bench",
            "storage.aws.secret.access.key": "bench",
        }
        create_bucket(endpoint, bucket)
        address = checked_by(work, "s3", processes, broker.bootstrap_servers, storage)
        s3 = recover_config(work, "s3", **storage)
        await measure(report, "s3", s3, address, S3_SEGMENTS)
    report.finish()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--recover"]:
        asyncio.run(recover_here(*sys.argv[2:5]))
    else:
        asyncio.run(main())
