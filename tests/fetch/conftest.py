"""Remote fetch fixtures: real store (each backend), real metadata manager, tiered real logs.

The shared stack is module-scoped: tiering the broker-written logs of
tests/data/kafka-logs once per backend keeps the suite fast; tests that change
the stack (outages, restarts) build their own with `FetchStack`.
"""

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest_asyncio
from support.services import (
    CLIENT_OPTIONS,
    BackendStack,
    ServiceRunning,
    load_properties,
    new_partition,
    service_properties,
    started,
)
from support.tiering import TieredSegment, batch, tier_directory, tier_segment
from support.wide_indexes import widened_copy

from remotelog.client import RemoteFetchClient
from remotelog.core.model import TopicIdPartition
from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.fetch.server import start_remote_fetch

BIG_BATCH_BYTES = 256 * 1024


def fetch_config(tmp: Path, store_port: int, metadata_port: int, name: str = "fetch", **extra):
    properties = service_properties(
        store_port,
        metadata_port,
        **{
            "remote.log.index.file.cache.dir": str(tmp / name / "index-cache"),
            "remote.log.manager.task.retry.backoff.ms": "20",
            "remote.log.manager.task.retry.backoff.max.ms": "200",
            "remote.fetch.max.wait.ms": "5000",
            **extra,
        },
    )
    return load_properties(RemoteFetchConfig, tmp / f"{name}.properties", properties)


@dataclass
class FetchStack(BackendStack):
    partitions: dict[str, tuple[TopicIdPartition, list[TieredSegment]]] = field(
        default_factory=dict
    )

    def direct_storage(self) -> dict[str, str]:
        """Properties that make a fetch service read the store's backend itself."""
        return {"remote.fetch.direct.storage.read.enabled": "true", **self.storage_properties()}

    async def start_fetch(self, name: str = "fetch", **extra):
        config = fetch_config(
            self.tmp, self.store.service.port, self.metadata.service.port, name, **extra
        )
        service = await start_remote_fetch(config)
        client = RemoteFetchClient(f"127.0.0.1:{service.port}", options=CLIENT_OPTIONS)
        return self.started(ServiceRunning(service, client, config))

    # -- tiering ----------------------------------------------------------------------

    def tip(self, name: str) -> TopicIdPartition:
        return self.partitions[name][0]

    def log_bytes(self, name: str) -> bytes:
        return b"".join(s.log for s in self.partitions[name][1])

    async def tier_directory(self, name: str, directory: Path) -> TopicIdPartition:
        tip = new_partition(name)
        segments = await tier_directory(self.store.client, self.metadata.client, tip, directory)
        self.partitions[name] = (tip, segments)
        return tip

    async def tier_batches(self, name: str, segments: list[list[bytes]], ends=None):
        """Synthetic segments of the given batches, after the topic's earlier ones if it
        has any; `ends` overrides metadata end offsets."""
        tip, tiered = self.partitions.get(name, (new_partition(name), []))
        for number, batches in enumerate(segments):
            log = b"".join(batches)
            start = int.from_bytes(batches[0][:8], "big")
            tiered.append(
                await tier_segment(
                    self.store.client,
                    self.metadata.client,
                    tip,
                    log,
                    {},
                    start_offset=start,
                    end_offset=ends[number] if ends else None,
                )
            )
        self.partitions[name] = (tip, tiered)
        return tip


def transactional_log(root: Path) -> PartitionLog:
    """Two segments: producer 7 aborts a transaction that spans them; producer 8 commits.

    Segment 0: offsets 0-2 plain, 3-4 txn(7), 5-6 txn(8), COMMIT(8) at 7.
    Segment 1 (rolled at 8): 8-9 txn(7), ABORT(7) at 10, 11-12 plain, 13-14 txn(9),
    ABORT(9) at 15, 16 plain.
    """
    log = PartitionLog.create(
        root, "txns", 0, uuid.uuid4(), LogConfig(segment_bytes=1 << 30, index_interval_bytes=1)
    )

    def plain(n):
        log.append([(b"k", b"plain")] * n, leader_epoch=0)

    def txn(pid, n):
        log.append(
            [(b"k", f"txn-{pid}".encode())] * n,
            leader_epoch=0,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
        )

    def end(pid, commit):
        log.append_marker(commit=commit, producer_id=pid, producer_epoch=0, leader_epoch=0)

    plain(3)
    txn(7, 2)
    txn(8, 2)
    end(8, True)
    log.roll()
    txn(7, 2)
    end(7, False)
    plain(2)
    txn(9, 2)
    end(9, False)
    plain(1)
    log.set_high_watermark(log.log_end_offset)
    log.roll()
    return log


@pytest_asyncio.fixture(scope="module", params=["filesystem", "s3"])
async def tiered(request, tmp_path_factory, broker, s3_endpoint, kafka_logs):
    """Both real logs, a transactional log and a log with an offset gap, tiered; a fetch service."""
    tmp = tmp_path_factory.mktemp(f"fetch-{request.param}")
    async with started(
        FetchStack(tmp, broker.bootstrap_servers, s3_endpoint, request.param)
    ) as stack:
        await stack.tier_directory("timeindex", kafka_logs / "timeindex_test")
        await stack.tier_directory("topic_a", kafka_logs / "test_topic_a-0")
        # The same log as a Kafka after KIP-1333 indexes it: 12-byte offset index entries.
        wide = widened_copy(kafka_logs / "timeindex_test", tmp / "wide" / "timeindex_test")
        await stack.tier_directory("timeindex_wide", wide)
        txn_log = transactional_log(tmp / "broker")
        await stack.tier_directory("txns", txn_log.directory)
        # Offsets 0-9 then 20-29: the first segment's metadata says it ends at 19
        # (compaction removed 10-19), so a read at 12 must continue into the next one.
        await stack.tier_batches(
            "gapped", [[batch(0, 5), batch(5, 5)], [batch(20, 5), batch(25, 5)]], ends=[19, 29]
        )
        # Batches four times the index slack: a Fetch's first range cannot reach the last one.
        await stack.tier_batches(
            "big_batches", [[batch(n, size=BIG_BATCH_BYTES) for n in range(4)]]
        )
        await stack.start_fetch()
        await stack.start_fetch("direct", **stack.direct_storage())
        # The bytes skip the store: its short circuit (filesystem), its URLs (S3).
        await stack.start_fetch(
            "short",
            **{
                "segment.store.short.circuit.socket.path": stack.short_circuit_socket,
                "segment.store.fetch.urls.enabled": "true",
            },
        )
        yield stack
