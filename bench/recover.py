"""`remotelog recover` at scale: segments recovered per second, against listing and reading.

A store is filled with SEGMENTS segments' objects (a manifest, a small log and its
indexes, as the store writes them) across PARTITIONS partitions: 100,000 in a
filesystem store and 10,000 in moto's S3 server (BENCH_S3_LINK adds a link in
front of it). Then, one after the other:
- the contender lists the same keys and reads and parses every manifest, writing
  nothing;
- recovery (the code `remotelog recover` runs) lists, reads, and writes each
  segment through a metadata manager (`remotelog serve metadata-manager`, over
  Tansu) that knows none of them: COPY_SEGMENT_STARTED, then FINISHED.

recover_vs_list_and_read (target 0.5): recovery's segments/s over the contender's.
The bench process's peak memory while recovering is reported beside it: the
listing is streamed, so it stays bounded whatever the segment count.
Run: .venv/bin/python bench/recover.py  (BENCH_FS_SEGMENTS, BENCH_S3_SEGMENTS)
"""

from __future__ import annotations

import asyncio
import os
import resource
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
    serve_metadata_manager,
    start,
)

from remotelog.client import ClientOptions, MetadataClient
from remotelog.core.config import load_config
from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.tasks import bounded_gather
from remotelog.remover.config import RecoverConfig
from remotelog.remover.recover import Recovery
from remotelog.segmentstore.backend import ObjectStore
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.layout import IndexRange, Manifest, SegmentFile, SegmentKeys

FS_SEGMENTS = int(os.environ.get("BENCH_FS_SEGMENTS", "100000"))
S3_SEGMENTS = int(os.environ.get("BENCH_S3_SEGMENTS", "10000"))
PARTITIONS = 100
FILLERS = 32
LOG = b"\0" * 512
INDEXES = b"\0" * 64


def manifests(segments: int) -> list[Manifest]:
    """`segments` segments of 100 offsets each, spread over PARTITIONS partitions."""
    tips = [TopicIdPartition(uuid.uuid4(), "recovered", p) for p in range(PARTITIONS)]
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
    """The contender: every manifest listed, read and parsed; nothing written."""
    read = 0
    async for stored in store.list(""):
        if stored.key.endswith(".rsm-manifest"):
            Manifest.from_json(await store.get(stored.key), stored.key)
            read += 1
    return read


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def timed(what: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    await what()
    return time.perf_counter() - began


async def measure(
    report: Report, name: str, config: RecoverConfig, metadata_address: str, segments: int
) -> None:
    store = await open_backend(config, config.backoff())
    metadata = MetadataClient(metadata_address, options=ClientOptions(timeout_s=30))
    try:
        await fill(store, manifests(segments))
        listed = await timed(lambda: list_and_read(store))
        before = peak_rss_mib()
        recovery = Recovery(store, metadata, "bench")
        outcome = {}

        async def recover() -> None:
            outcome["report"] = await recovery.run()

        recovered = await timed(recover)
        written = outcome["report"].segments_missing
        assert written == segments, f"{name}: wrote {written} of {segments}"
        report.ratio(
            f"recover_vs_list_and_read_{name}",
            listed / recovered,
            0.5,
            segments=segments,
            recover_segments_per_s=round(segments / recovered),
            list_and_read_segments_per_s=round(segments / listed),
            recover_s=round(recovered, 1),
            peak_rss_mib=round(peak_rss_mib()),
            peak_rss_before_mib=round(before),
        )
    finally:
        await metadata.close()
        await store.close()


def recover_config(work: Path, name: str, **storage: str) -> RecoverConfig:
    path = work / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in storage.items()))
    config, _ = load_config(RecoverConfig, path, {})
    return config


async def main() -> None:
    report = Report("recover")
    with bench_stack("recover") as (work, processes, broker):
        manager, port = serve_metadata_manager(work, broker.bootstrap_servers)
        processes.append(manager)
        address = f"127.0.0.1:{port}"
        moto, line = start(s3_server_command(), "PORT")
        processes.append(moto)
        endpoint = f"http://127.0.0.1:{line.split()[1]}"
        storage = {"storage.backend": "filesystem", "storage.root": str(work / "fs")}
        filesystem = recover_config(work, "filesystem", **storage)
        await measure(report, "filesystem", filesystem, address, FS_SEGMENTS)
        bucket = f"recover-{uuid.uuid4().hex[:8]}"
        s3 = recover_config(
            work,
            "s3",
            **{
                "storage.backend": "s3",
                "storage.s3.bucket.name": bucket,
                "storage.s3.endpoint.url": endpoint,
                "storage.s3.path.style.access.enabled": "true",
                "storage.aws.access.key.id": "bench",
                "storage.aws.secret.access.key": "bench",
            },
        )
        create_bucket(endpoint, bucket)
        await measure(report, "s3", s3, address, S3_SEGMENTS)
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
