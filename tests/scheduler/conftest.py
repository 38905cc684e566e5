"""Copy scheduler fixtures: a simulated broker's log dir beside the three real services."""

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest_asyncio
from support.s3 import s3_client
from support.services import load_properties, metadata_config, start_metadata, start_store

from remotelog.client import ClientOptions, CopySchedulerClient, PartitionAssignment
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.kafka.partition_log import LogConfig, PartitionLog
from remotelog.kafka.records import decode_records, iter_batches
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.server import start_copy_scheduler

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
CLIENT_OPTIONS = ClientOptions(
    timeout_s=20, backoff=ExponentialBackoff(initial_ms=20, max_ms=200, jitter=0.2)
)


def scheduler_config(tmp: Path, store_port: int, metadata_port: int, name: str, **extra: str):
    properties = {
        "listen.address": "127.0.0.1:0",
        "segment.store.address": f"127.0.0.1:{store_port}",
        "metadata.manager.address": f"127.0.0.1:{metadata_port}",
        "remote.log.manager.task.interval.ms": "100",
        "remote.log.manager.task.retry.backoff.ms": "50",
        "remote.log.manager.task.retry.backoff.max.ms": "400",
        "remote.log.manager.rpc.timeout.ms": "10000",
        "remote.log.manager.dangling.segment.grace.ms": "60000",
        **extra,
    }
    path = tmp / f"{name}.properties"
    return load_properties(CopySchedulerConfig, path, properties)


class Broker:
    """One broker's log dir with one partition, written as Kafka writes it."""

    def __init__(self, root: Path, tip: TopicIdPartition, clock=time.time, **log_config):
        config = LogConfig(**{"segment_bytes": 1 << 30, "index_interval_bytes": 1024, **log_config})
        self.tip = tip
        self.log = PartitionLog.create(
            root, tip.topic, tip.partition, tip.topic_id, config, clock=clock
        )
        self.records: dict[int, tuple[bytes, bytes]] = {}

    @property
    def directory(self) -> Path:
        return self.log.directory

    def produce(self, batches: int, *, epoch: int = 0, per_batch: int = 10, timestamp_ms=None):
        for _ in range(batches):
            base = self.log.log_end_offset
            pairs = [
                (f"k{base + i}".encode(), f"v{base + i}".encode() * 20) for i in range(per_batch)
            ]
            self.log.append(pairs, leader_epoch=epoch, timestamp_ms=timestamp_ms)
            for i, pair in enumerate(pairs):
                self.records[base + i] = pair
        self.log.set_high_watermark(self.log.log_end_offset)

    def segments(self, count: int, batches: int = 3, **kwargs) -> None:
        """`count` segments of `batches` batches each, rolled after each."""
        for _ in range(count):
            self.produce(batches, **kwargs)
            self.log.roll()

    def assignment(self, epoch: int = 0, **retention) -> PartitionAssignment:
        return PartitionAssignment(self.tip, self.directory, epoch, **retention)

    @property
    def rolled_end(self) -> int:
        """End offset of the newest rolled segment."""
        return self.log.active_segment.base_offset - 1


def new_partition(topic: str = "orders", partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(uuid.uuid4(), topic, partition)


@dataclass
class Stack:
    """The segment store, the metadata manager and any number of schedulers, all real."""

    tmp: Path
    bootstrap: str
    s3_endpoint: str
    backend: str = "filesystem"
    bucket: str = ""
    store: object = None
    metadata: object = None
    schedulers: list = field(default_factory=list)

    async def start_store(self, **extra):
        self.store = await start_store(
            self.backend, self.tmp, self.s3_endpoint, self.bucket, **extra
        )

    async def start_metadata(self):
        self.metadata = await start_metadata(metadata_config(self.tmp, self.bootstrap))

    async def start_scheduler(self, name: str = "scheduler", **extra):
        config = scheduler_config(
            self.tmp, self.store.service.port, self.metadata.service.port, name, **extra
        )
        service = await start_copy_scheduler(config)
        client = CopySchedulerClient(f"127.0.0.1:{service.port}", options=CLIENT_OPTIONS)
        running = SchedulerRunning(service, client)
        self.schedulers.append(running)
        return running

    async def stop_scheduler(self, running):
        self.schedulers.remove(running)
        await running.stop()

    async def stop(self):
        for running in list(self.schedulers):
            await self.stop_scheduler(running)
        if self.metadata is not None:
            await self.metadata.stop()
            self.metadata = None
        if self.store is not None:
            await self.store.client.close()
            await self.store.service.stop(1)
            self.store = None

    # -- what is in the remote tier -----------------------------------------------

    async def segments(self, tip, states=None):
        listed = [s async for s in self.metadata.client.list_remote_log_segments(tip)]
        return [s for s in listed if states is None or s.state in states]

    async def remote_records(self, tip) -> dict[int, tuple[bytes, bytes]]:
        """Every record of every COPY_SEGMENT_FINISHED segment, read back from the store."""
        out: dict[int, tuple[bytes, bytes]] = {}
        for segment in await self.segments(tip, {FINISHED}):
            data = b"".join([c async for c in self.store.client.fetch_log_segment(segment, 0)])
            for header in iter_batches(data):
                for record in decode_records(data, header):
                    out[record.offset] = (record.key, record.value)
        return out


class SchedulerRunning:
    def __init__(self, service, client):
        self.service = service
        self.client = client

    @property
    def scheduler(self):
        return self.service.app

    async def stop(self):
        await self.client.close()
        await self.service.stop(1)


@pytest_asyncio.fixture(params=["filesystem", "s3"])
async def stack(request, tmp_path, broker, s3_endpoint):
    """Store (each backend), metadata manager; tests start their schedulers."""
    bucket = f"remotelog-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    running = Stack(tmp_path, broker.bootstrap_servers, s3_endpoint, request.param, bucket)
    await running.start_store()
    await running.start_metadata()
    yield running
    await running.stop()


@pytest_asyncio.fixture
async def fs_stack(tmp_path, broker, s3_endpoint):
    """The same on the filesystem store only, for tests about scheduling rather than storage."""
    running = Stack(tmp_path, broker.bootstrap_servers, s3_endpoint)
    await running.start_store()
    await running.start_metadata()
    yield running
    await running.stop()
