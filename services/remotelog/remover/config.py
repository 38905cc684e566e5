"""Configuration of the partition remover service (RemotePartitionRemover) and of the scrub."""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.core.config import setting
from remotelog.core.settings import (
    BrokerIdSettings,
    CustomMetadataSettings,
    KafkaClusterSettings,
    MetadataClientSettings,
    MetadataTopicSettings,
    RedisSettings,
    RetrySettings,
    SegmentStoreClientSettings,
    ServerSettings,
    listen_address_setting,
)
from remotelog.segmentstore.config import StorageSettings


@dataclass(frozen=True)
class RemoverCallSettings:
    """The deadline of the remover's and the scrub's calls to the other services."""

    rpc_timeout_ms: int = setting(
        "remote.partition.remover.rpc.timeout.ms",
        30_000,
        "Deadline of each call to the segment store and the metadata manager",
        min=1,
    )


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


@dataclass(frozen=True)
class RecoverConfig(
    StorageSettings,
    MetadataClientSettings,
    RetrySettings,
    RemoverCallSettings,
    CustomMetadataSettings,
    KafkaClusterSettings,
):
    """`remotelog recover`: the bucket or directory whose manifests describe the
    segments, the metadata manager that writes them to the metadata topic, and the
    Kafka cluster whose topic ids it recovers (`--bootstrap-server`, under the
    Kafka security settings here)."""
