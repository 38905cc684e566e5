"""Configuration of the remote fetch service (RemoteLogReader, purgatory, index cache)."""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.core.config import setting
from remotelog.core.model import INT64_MAX
from remotelog.core.settings import listen_address_setting
from remotelog.segmentstore.config import TierClientSettings


@dataclass(frozen=True)
class RemoteFetchConfig(TierClientSettings):
    listen_address: str = listen_address_setting("127.0.0.1:7304")
    reader_threads: int = setting(
        "remote.log.reader.threads", 10, "Concurrent remote reads", min=1, max=1024
    )
    reader_max_pending_tasks: int = setting(
        "remote.log.reader.max.pending.tasks",
        100,
        "Queued reads before READER_QUEUE_FULL",
        min=1,
    )
    fetch_max_wait_ms: int = setting(
        "remote.fetch.max.wait.ms", 500, "Longest a Fetch waits for its remote reads", min=1
    )
    index_cache_total_size_bytes: int = setting(
        "remote.log.index.file.cache.total.size.bytes",
        1024 * 1024 * 1024,
        "Disk used by the remote index cache",
        min=1,
    )
    index_cache_dir: str = setting(
        "remote.log.index.file.cache.dir",
        "~/.local/share/remotelog/index-cache",
        "Directory of the remote index cache",
    )
    purgatory_tick_ms: int = setting(
        "remote.fetch.purgatory.tick.ms", 1, "Tick of the delayed-fetch timing wheel", min=1
    )
    purgatory_wheel_size: int = setting(
        "remote.fetch.purgatory.wheel.size", 20, "Buckets per timing wheel", min=2
    )
    max_partitions: int = setting(
        "remote.fetch.max.partitions", 1000, "Partitions one Fetch may name", min=1
    )
    segment_metadata_cache_ms: int = setting(
        "remote.fetch.segment.metadata.cache.ms",
        5000,
        "How long a partition's remote segment list is reused (a miss rebuilds it at once)",
        min=0,
    )
    bulk_chunk_bytes: int = setting(
        "remote.fetch.bulk.chunk.bytes",
        # Each message has a fixed cost beyond its bytes (asyncio, gRPC, the batch
        # walk), so messages are not small; at 4 MiB each stage's copy (into the
        # message, gRPC's slice, the socket; on the client the receive and the
        # slice out) finds its source out of the CPU cache (bench/README.md).
        2 * 1024 * 1024,
        "Default size of the chunks ReadOffsetRange streams",
        min=64 * 1024,
    )
    bulk_read_ahead_chunks: int = setting(
        "remote.fetch.bulk.read.ahead.chunks",
        4,
        "Chunks ReadOffsetRange reads ahead of the one being sent",
        min=1,
        max=64,
    )
    index_cache_redis_ttl_ms: int = setting(
        "remote.log.index.cache.redis.ttl.ms",
        24 * 3600 * 1000,
        "Lifetime of index files in the shared Redis level (used when redis.url is set)",
        min=1000,
    )
    rpc_timeout_ms: int = setting(
        "remote.fetch.rpc.timeout.ms",
        30_000,
        "Deadline of calls to the segment store and metadata manager without a caller deadline",
        min=1,
    )
    direct_storage_read: bool = setting(
        "remote.fetch.direct.storage.read.enabled",
        False,
        "Read segments straight from the storage.* backend instead of through the segment store",
    )
    segment_store_fetch_urls: bool = setting(
        "segment.store.fetch.urls.enabled",
        True,
        "Read segment logs from the presigned URLs the segment store signs "
        "(its storage.s3.fetch.url.expiry.ms): S3 to this service in one hop; and hand "
        "them to bulk readers (LocateOffsetRange: Spark tasks, TieredConsumer), which "
        "then read S3 themselves. Where the store signs none, through FetchLogSegment "
        "and ReadOffsetRange",
    )
    # KIP-956's fetch quota over all remote reads of this service.
    fetch_max_bytes_per_second: int = setting(
        "remote.log.manager.fetch.max.bytes.per.second",
        INT64_MAX,
        "Rate of remote reads over all partitions; above it, Fetch answers empty until the "
        "rate falls and ReadOffsetRange waits",
        min=1,
    )
    fetch_quota_window_num: int = setting(
        "remote.log.manager.fetch.quota.window.num", 11, "Samples of the fetch quota", min=1
    )
    fetch_quota_window_size_seconds: int = setting(
        "remote.log.manager.fetch.quota.window.size.seconds",
        1,
        "Seconds per fetch quota sample",
        min=1,
    )
