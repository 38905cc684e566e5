"""A slow store, a full reader queue, a store outage, the index cache's bound and restarts."""

import asyncio
import contextlib
import time
import uuid

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2
from support.services import started
from support.serving import serve_until_sigterm
from support.telemetry import counter
from support.waiting import eventually

from remotelog.client import FetchPartition
from remotelog.core import metrics as m
from remotelog.core.errors import ReaderQueueFullError, RemoteLogError
from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.kafka.records import iter_batches

from .conftest import FetchStack, batch, fetch_config

SERVICE = "remotelog.api.fetch.v1.RemoteFetchService"
SEGMENTS = 8


def indexed_log(root, name: str) -> PartitionLog:
    """SEGMENTS rolled segments of 5 batches, every batch indexed (real index files)."""
    log = PartitionLog.create(
        root, name, 0, uuid.uuid4(), LogConfig(segment_bytes=1 << 30, index_interval_bytes=1)
    )
    for _ in range(SEGMENTS):
        for _ in range(5):
            log.append([(b"k", b"v" * 100)] * 3, leader_epoch=0)
        log.roll()
    log.set_high_watermark(log.log_end_offset)
    return log


@contextlib.asynccontextmanager
async def indexed_stack(backend, tmp_path, broker, s3_endpoint):
    """A stack on `backend` with the indexed log tiered as "indexed"."""
    async with started(
        FetchStack(tmp_path, broker.bootstrap_servers, s3_endpoint, backend)
    ) as stack:
        log = indexed_log(tmp_path / "broker", "indexed")
        await stack.tier_directory("indexed", log.directory)
        yield stack


@pytest_asyncio.fixture
async def s3_stack(tmp_path, broker, s3_endpoint):
    async with indexed_stack("s3", tmp_path, broker, s3_endpoint) as stack:
        yield stack


@pytest_asyncio.fixture
async def fs_stack(tmp_path, broker, s3_endpoint):
    async with indexed_stack("filesystem", tmp_path, broker, s3_endpoint) as stack:
        yield stack


def segment_starts(stack, name="indexed"):
    return [s.metadata.start_offset for s in stack.partitions[name][1]]


async def test_slow_store_expires_with_empty_records_and_frees_the_workers(
    s3_stack, s3_faults, telemetry
):
    reader, _ = telemetry
    running = await s3_stack.start_fetch(**{"remote.log.reader.threads": "2"})
    tip = s3_stack.tip("indexed")
    expired_before = counter(reader, m.REMOTE_FETCH_EXPIRES.name, None, "remotelog.fetch") or 0
    s3_faults("slow", count=10_000, method="GET", delay_ms=2_000)
    try:
        started = time.monotonic()
        (result,) = await running.client.fetch([FetchPartition(tip, 0)], max_wait_ms=300)
        waited = time.monotonic() - started
    finally:
        s3_faults(None)
    assert result.error is None
    assert result.records == b""
    assert waited >= 0.3
    assert running.app.purgatory.expired == 1
    assert (
        counter(reader, m.REMOTE_FETCH_EXPIRES.name, None, "remotelog.fetch") == expired_before + 1
    )
    # The expired read was cancelled where it ran: no worker keeps reading.
    await eventually(lambda: running.app.pool.busy == 0)
    (result,) = await running.client.fetch([FetchPartition(tip, 0)], max_wait_ms=5_000)
    assert result.error is None
    assert result.records


async def test_a_full_reader_queue_refuses_the_whole_fetch_at_once(s3_stack, s3_faults):
    running = await s3_stack.start_fetch(
        **{"remote.log.reader.threads": "1", "remote.log.reader.max.pending.tasks": "1"}
    )
    tip = s3_stack.tip("indexed")
    other = await s3_stack.tier_batches("other", [[batch(0, 5)]])
    starts = segment_starts(s3_stack)
    s3_faults("slow", count=10_000, method="GET", delay_ms=1_000)
    try:
        # One read runs, one waits: the queue is full.
        busy = asyncio.ensure_future(
            running.client.fetch(
                [FetchPartition(tip, 0), FetchPartition(other, 0)], max_wait_ms=5_000
            )
        )
        await eventually(lambda: running.app.pool.busy == 1 and running.app.pool.queue_size == 1)
        # The client repeats a RESOURCE_EXHAUSTED call (error.proto's rule) until its
        # deadline, then reports why it could not get through.
        with pytest.raises(ReaderQueueFullError) as info:
            await running.client.fetch([FetchPartition(tip, starts[1])], timeout_s=0.5)
        assert info.value.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        s3_faults(None)
    results = await busy
    assert [r.error for r in results] == [None, None]
    assert all(r.records for r in results)


async def test_store_outage_is_retried_until_the_store_returns(fs_stack):
    running = await fs_stack.start_fetch()
    tip = fs_stack.tip("indexed")
    port = fs_stack.store.service.port
    await fs_stack.stop_store(0)

    # Down for good within the deadline: a retriable error, after retries.
    with pytest.raises(RemoteLogError) as info:
        _ = [c async for c in running.client.read_offset_range(tip, 0, timeout_s=1.0)]
    assert info.value.retriable

    async def restart_later():
        await asyncio.sleep(0.7)
        await fs_stack.start_store(**{"listen.address": f"127.0.0.1:{port}"})

    restart = asyncio.ensure_future(restart_later())
    started = time.monotonic()
    (result,) = await running.client.fetch([FetchPartition(tip, 0)], max_wait_ms=10_000)
    await restart
    assert time.monotonic() - started >= 0.7
    assert result.error is None
    assert result.records == fs_stack.partitions["indexed"][1][0].log


async def test_index_cache_holds_its_bound_under_churn_and_is_reused_after_restart(fs_stack):
    directory = fs_stack.tmp / "broker" / "indexed-0"
    # As cached: the offset index in 12-byte entries where the broker wrote 8-byte ones.
    sizes = [
        sum(p.stat().st_size * (3 if p.suffix == ".index" else 2) // 2 for p in files)
        for log in sorted(directory.glob("*.log"))
        if (files := list(directory.glob(f"{log.stem}.*index")))
    ]
    # Room for at least three entries, never all of them. The time indexes' sizes follow the
    # wall clock (an entry only when the max timestamp grows), so 3 or 4 entries may fit.
    bound = 3 * max(sizes)
    extra = {"remote.log.index.file.cache.total.size.bytes": str(bound)}
    running = await fs_stack.start_fetch("cached", **extra)
    tip = fs_stack.tip("indexed")
    cache = running.app.index_cache
    directory = cache.directory
    for start in segment_starts(fs_stack) * 2:
        (result,) = await running.client.fetch([FetchPartition(tip, start)])
        assert next(iter_batches(result.records)).base_offset == start
        assert cache.size_bytes <= bound
        assert sum(p.stat().st_size for p in directory.glob("*index")) <= bound
    kept = len(cache)
    assert 3 <= kept < SEGMENTS
    assert cache.store_fetches == 2 * SEGMENTS  # LRU: a cyclic scan misses every time
    await fs_stack.stop_service(running)

    # Leftovers of a crash: a partial file and an entry without its `.index`.
    (directory / "999_partial.index.tmp").write_bytes(b"x")
    (directory / "5_incomplete.timeindex").write_bytes(b"x" * 12)
    running = await fs_stack.start_fetch("cached", **extra)
    cache = running.app.index_cache
    assert (
        sorted(p.name for p in directory.iterdir() if "partial" in p.name or "incomplete" in p.name)
        == []
    )
    assert len(cache) == kept  # every complete entry is reloaded; the leftovers are not
    assert (directory / "FORMAT").read_text() == "offset-index-entry-bytes=12\n"
    newest = segment_starts(fs_stack)[-1]
    (result,) = await running.client.fetch([FetchPartition(tip, newest)])
    assert result.records
    assert cache.store_fetches == 0
    await fs_stack.stop_service(running)

    # An older remotelog's cache (no FORMAT: 8-byte entries, perhaps) is emptied, not read.
    (directory / "FORMAT").unlink()
    running = await fs_stack.start_fetch("cached", **extra)
    cache = running.app.index_cache
    assert len(cache) == 0
    assert [p.name for p in directory.iterdir()] == ["FORMAT"]
    (result,) = await running.client.fetch([FetchPartition(tip, newest)])
    assert next(iter_batches(result.records)).base_offset == newest
    assert cache.store_fetches == 1


async def test_concurrent_misses_fetch_a_segments_indexes_once(fs_stack):
    running = await fs_stack.start_fetch()
    tip = fs_stack.tip("indexed")
    results = await asyncio.gather(
        *(running.client.fetch([FetchPartition(tip, offset)]) for offset in range(10))
    )
    assert all(r.error is None and r.records for (r,) in results)
    assert running.app.index_cache.store_fetches == 1


async def test_redis_second_level_is_shared_by_fetch_instances(fs_stack, redis_url):
    first = await fs_stack.start_fetch("first", **{"redis.url": redis_url})
    second = await fs_stack.start_fetch("second", **{"redis.url": redis_url})
    tip = fs_stack.tip("indexed")
    start = segment_starts(fs_stack)[2]
    (a,) = await first.client.fetch([FetchPartition(tip, start)])
    (b,) = await second.client.fetch([FetchPartition(tip, start)])
    assert a.records == b.records
    assert first.app.index_cache.store_fetches == 1
    assert second.app.index_cache.store_fetches == 0
    assert len(second.app.index_cache) == 1  # and now on its own disk too


async def test_an_index_cache_dir_that_cannot_be_made_stops_the_start_naming_it(fs_stack, tmp_path):
    (tmp_path / "a-file").write_text("x")
    bad = {"remote.log.index.file.cache.dir": str(tmp_path / "a-file" / "cache")}
    with pytest.raises(OSError, match=r"^remote\.log\.index\.file\.cache\.dir: cannot create"):
        await fs_stack.start_fetch("unmade", **bad)


def test_serve_reports_health_and_stops_on_sigterm(fs_stack, tmp_path):
    fetch_config(tmp_path, fs_stack.store.service.port, fs_stack.metadata.service.port, "served")
    status, code, printed = serve_until_sigterm(
        "remote-fetch", tmp_path / "served.properties", SERVICE
    )
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert code == 0
    assert "shutting down" in printed
