"""Configuration of the copy scheduler service (RemoteLogManager tasks)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from remotelog.core.addresses import grpc_address
from remotelog.core.config import setting
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import INT64_MAX
from remotelog.core.settings import (
    ADDRESS_FORM,
    BrokerIdSettings,
    CustomMetadataSettings,
    KafkaClusterSettings,
    listen_address_setting,
)
from remotelog.segmentstore.config import TierClientSettings


def _pattern_problem(value: str) -> str | None:
    try:
        re.compile(value)
    except re.error as error:
        return f"is not a regular expression: {error}"
    return None


@dataclass(frozen=True)
class DiscoverySettings(KafkaClusterSettings):
    """A sidecar's discovery: the partitions this broker leads and follows, found from the
    cluster (bootstrap.servers, with the security settings) and the broker's log.dirs."""

    discovery_enabled: bool = setting(
        "remote.log.manager.discovery.enabled",
        False,
        "Find this broker's partitions by itself every interval (a sidecar beside a broker "
        "without the plugin) and follow topic deletions; false: partitions come from "
        "OnPartitionLeadershipChanges calls",
    )
    discovery_interval_ms: int = setting(
        "remote.log.manager.discovery.interval.ms",
        10_000,
        "Pause between looks at the cluster and the log directories",
        min=100,
    )
    log_dirs: str = setting(
        "log.dirs",
        "",
        "The broker's log.dirs, comma-separated, as this process sees them (needed with discovery)",
        form=(r"([^,\s]+(\s*,\s*[^,\s]+)*)?", "path[,path...]"),
    )
    discovery_topic_pattern: str = setting(
        "remote.log.manager.discovery.topic.pattern",
        "",
        "Tier the topics whose whole name matches this regular expression, besides those with "
        "remote.storage.enable=true (brokers from 3.6 refuse that config without their own "
        "tiered storage); empty: only those",
        check=_pattern_problem,
    )
    partition_remover_address: str = setting(
        "partition.remover.address",
        "127.0.0.1:7305",
        "host:port of the partition remover, told when a topic with remote data is deleted",
        form=ADDRESS_FORM,
        check=grpc_address(),
    )

    def discovery_log_dirs(self) -> list[str]:
        """log.dirs as a list; refused when discovery is on without them."""
        dirs = [d.strip() for d in self.log_dirs.split(",") if d.strip()]
        if self.discovery_enabled and not dirs:
            raise InvalidArgumentError(
                "log.dirs", "remote.log.manager.discovery.enabled=true needs the broker's log.dirs"
            )
        return dirs


@dataclass(frozen=True)
class CopySchedulerConfig(
    TierClientSettings, CustomMetadataSettings, BrokerIdSettings, DiscoverySettings
):
    listen_address: str = listen_address_setting("127.0.0.1:7303")
    task_interval_ms: int = setting(
        "remote.log.manager.task.interval.ms", 30_000, "Pause between runs of a partition", min=1
    )
    copier_pool_size: int = setting(
        "remote.log.manager.copier.thread.pool.size", 10, "Concurrent copy tasks", min=1
    )
    expiration_pool_size: int = setting(
        "remote.log.manager.expiration.thread.pool.size", 10, "Concurrent expiration tasks", min=1
    )
    follower_pool_size: int = setting(
        "remote.log.manager.follower.thread.pool.size", 2, "Concurrent follower tasks", min=1
    )
    copy_max_bytes_per_second: int = setting(
        "remote.log.manager.copy.max.bytes.per.second",
        INT64_MAX,
        "Copy quota over all partitions (KIP-956)",
        min=1,
    )
    copy_quota_window_num: int = setting(
        "remote.log.manager.copy.quota.window.num", 11, "Samples of the copy quota", min=1
    )
    copy_quota_window_size_seconds: int = setting(
        "remote.log.manager.copy.quota.window.size.seconds", 1, "Seconds per quota sample", min=1
    )
    lease_ms: int = setting(
        "remote.log.manager.lease.ms", 30_000, "Lease of a partition's task across instances", min=1
    )
    retention_ms: int = setting(
        "log.retention.ms", 604_800_000, "retention.ms of partitions that do not set it", min=-1
    )
    retention_bytes: int = setting(
        "log.retention.bytes", -1, "retention.bytes of partitions that do not set it", min=-1
    )
    local_retention_ms: int = setting(
        "log.local.retention.ms", -2, "local.retention.ms default; -2 = retention.ms", min=-2
    )
    local_retention_bytes: int = setting(
        "log.local.retention.bytes",
        -2,
        "local.retention.bytes default; -2 = retention.bytes",
        min=-2,
    )
    local_retention_enabled: bool = setting(
        "remote.log.manager.local.retention.enabled",
        False,
        "Delete tiered segments from the log directory by local retention: only for a "
        "directory no Kafka broker owns (the simulated broker's); a running broker deletes "
        "by its own local.retention.* and the scheduler only reads its files",
    )
    dangling_segment_grace_ms: int = setting(
        "remote.log.manager.dangling.segment.grace.ms",
        300_000,
        "Age after which a COPY/DELETE_SEGMENT_STARTED left by a crashed run is cleaned up",
        min=0,
    )
    rpc_timeout_ms: int = setting(
        "remote.log.manager.rpc.timeout.ms",
        120_000,
        "Deadline of each call to the segment store and the metadata manager",
        min=1,
    )
    direct_storage_write: bool = setting(
        "remote.log.manager.direct.storage.write.enabled",
        False,
        "Copy and delete segments straight in the storage.* backend (the segment store "
        "in this process, as Kafka runs its RSM in the broker) instead of through "
        "segment.store.address",
    )

    def clashes(self) -> list[tuple[str, str]]:
        """Settings refused together, as (key, why) for load_config to report."""
        if self.discovery_enabled and self.local_retention_enabled:
            # A discovering sidecar runs beside a real broker: deleting its segments
            # would pull files from under Kafka's own log.
            return [
                (
                    "remote.log.manager.local.retention.enabled",
                    "true together with remote.log.manager.discovery.enabled=true: a "
                    "sidecar beside a Kafka broker must leave the broker's segments to its "
                    "own local.retention.*; set one of them to false",
                )
            ]
        return []
