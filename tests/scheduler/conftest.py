"""Copy scheduler fixtures: a simulated broker's log dir beside the three real services."""

import time
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio
from support.services import (
    CLIENT_OPTIONS,
    BackendStack,
    ServiceRunning,
    load_properties,
    service_properties,
    started,
)

from remotelog.client import CopySchedulerClient, PartitionAssignment
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.server import start_copy_scheduler

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def scheduler_config(tmp: Path, store_port: int, metadata_port: int, name: str, **extra: str):
    properties = service_properties(
        store_port,
        metadata_port,
        **{
            "remote.log.manager.task.interval.ms": "100",
            "remote.log.manager.task.retry.backoff.ms": "50",
            "remote.log.manager.task.retry.backoff.max.ms": "400",
            "remote.log.manager.rpc.timeout.ms": "10000",
            "remote.log.manager.dangling.segment.grace.ms": "60000",
            # The simulated brokers' log dirs have no Kafka to free them.
            "remote.log.manager.local.retention.enabled": "true",
            **extra,
        },
    )
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


class SchedulerRunning(ServiceRunning):
    @property
    def scheduler(self):
        return self.service.app

    async def state_of(self, tip: TopicIdPartition):
        """The partition's state as the scheduler reports it (PartitionState)."""
        return await self.client.partition_state(tip)

    async def tiered_to(self, tip: TopicIdPartition, offset: int) -> bool:
        """Whether the partition's highest tiered offset is `offset`."""
        return (await self.state_of(tip)).highest_tiered_offset == offset


@dataclass
class SchedulerStack(BackendStack):
    """The segment store, the metadata manager and any number of schedulers, all real."""

    async def start_scheduler(self, name: str = "scheduler", **extra: str) -> SchedulerRunning:
        config = scheduler_config(
            self.tmp, self.store.service.port, self.metadata.service.port, name, **extra
        )
        service = await start_copy_scheduler(config)
        client = CopySchedulerClient(f"127.0.0.1:{service.port}", options=CLIENT_OPTIONS)
        return self.started(SchedulerRunning(service, client, config))


@pytest_asyncio.fixture(params=["filesystem", "s3"])
async def stack(request, tmp_path, broker, s3_endpoint):
    """Store (each backend), metadata manager; tests start their schedulers."""
    async with started(
        SchedulerStack(tmp_path, broker.bootstrap_servers, s3_endpoint, request.param)
    ) as running:
        yield running


@pytest_asyncio.fixture
async def fs_stack(tmp_path, broker, s3_endpoint):
    """The same on the filesystem store only, for tests about scheduling rather than storage."""
    async with started(SchedulerStack(tmp_path, broker.bootstrap_servers, s3_endpoint)) as running:
        yield running
