"""Configuration of the partition remover service (RemotePartitionRemover)."""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.core.config import setting
from remotelog.core.settings import (
    MetadataClientSettings,
    MetadataTopicSettings,
    RedisSettings,
    RetrySettings,
    SegmentStoreClientSettings,
    ServerSettings,
)


@dataclass(frozen=True)
class PartitionRemoverConfig(
    ServerSettings,
    RetrySettings,
    SegmentStoreClientSettings,
    MetadataClientSettings,
    RedisSettings,
    MetadataTopicSettings,
):
    listen_address: str = setting("listen.address", "127.0.0.1:7305", "host:port to bind")
    task_interval_ms: int = setting(
        "remote.partition.remover.task.interval.ms",
        3_600_000,
        "Pause between sweeps of marked partitions (new markers run at once)",
        min=1,
    )
    broker_id: int = setting("broker.id", 0, "Broker id written into deletion events", min=0)
