"""Configuration of the partition remover service (RemotePartitionRemover) and of the scrub."""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.core.config import setting
from remotelog.core.settings import (
    BrokerIdSettings,
    MetadataClientSettings,
    MetadataTopicSettings,
    RedisSettings,
    RemoverCallSettings,
    RetrySettings,
    SegmentStoreClientSettings,
    ServerSettings,
    listen_address_setting,
)
from remotelog.segmentstore.config import StorageSettings


@dataclass(frozen=True)
class PartitionRemoverConfig(
    RemoverCallSettings,
    BrokerIdSettings,
    ServerSettings,
    RetrySettings,
    SegmentStoreClientSettings,
    MetadataClientSettings,
    RedisSettings,
    MetadataTopicSettings,
):
    listen_address: str = listen_address_setting("127.0.0.1:7305")
    task_interval_ms: int = setting(
        "remote.partition.remover.task.interval.ms",
        3_600_000,
        "Pause between sweeps of marked partitions (new markers run at once)",
        min=1,
    )
    lease_ms: int = setting(
        "remote.partition.remover.lease.ms",
        30_000,
        "Lease of a metadata-topic partition across remover instances",
        min=100,
    )
    consumer_group_id: str = setting(
        "remote.partition.remover.consumer.group.id",
        "remotelog-partition-remover",
        "Consumer group whose committed offsets record the removers' progress",
    )


@dataclass(frozen=True)
class ScrubConfig(StorageSettings, MetadataClientSettings, RetrySettings, RemoverCallSettings):
    """`remotelog scrub`: the bucket or directory to list, and the metadata saying what is live."""
