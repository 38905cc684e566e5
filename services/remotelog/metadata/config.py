"""Configuration of the metadata manager service (TopicBasedRemoteLogMetadataManager)."""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.core.config import setting
from remotelog.core.errors import ReadOnlyMetadataError
from remotelog.core.settings import (
    CustomMetadataSettings,
    MetadataTopicSettings,
    RedisSettings,
    SegmentStoreClientSettings,
    ServerSettings,
    listen_address_setting,
)


@dataclass(frozen=True)
class MetadataManagerConfig(
    ServerSettings,
    MetadataTopicSettings,
    CustomMetadataSettings,
    RedisSettings,
    SegmentStoreClientSettings,
):
    # segment.store.address: the store whose manifests each recovered segment is checked
    # against before it is written (RecoverRemoteLogSegments).
    listen_address: str = listen_address_setting("127.0.0.1:7302")
    read_only: bool = setting(
        "remote.log.metadata.read.only",
        False,
        "Only read __remote_log_metadata, never create or write it: for brokers whose "
        "own TopicBasedRemoteLogMetadataManager is the topic's one writer",
    )
    metadata_topic_replication_factor: int = setting(
        "remote.log.metadata.topic.replication.factor",
        3,
        "Replication factor of __remote_log_metadata when it is created",
        min=1,
        max=32767,
    )
    metadata_topic_retention_ms: int = setting(
        "remote.log.metadata.topic.retention.ms",
        -1,
        "retention.ms of __remote_log_metadata; -1 = forever",
        min=-1,
    )
    keyed_records: bool = setting(
        "remote.log.metadata.keyed.records.enabled",
        False,
        "Write every record under its 37-byte RemoteLogSegmentMetadataKey, and tombstones of "
        "a segment's earlier states at DELETE_SEGMENT_FINISHED, as a Kafka whose metadata "
        "manager compacts __remote_log_metadata does (KIP-1266); a topic created then is "
        "compacted. Set as the cluster's other metadata manager writes, so either can take "
        "over. Keyed records and tombstones are read whatever it says",
    )
    consume_wait_ms: int = setting(
        "remote.log.metadata.consume.wait.ms",
        120_000,
        "How long a write waits for its own event to be consumed back",
        min=1,
    )
    initialization_retry_interval_ms: int = setting(
        "remote.log.metadata.initialization.retry.interval.ms",
        100,
        "Pause between attempts to create or describe the metadata topic",
        min=1,
    )
    initialization_retry_max_timeout_ms: int = setting(
        "remote.log.metadata.initialization.retry.max.timeout.ms",
        120_000,
        "Give up initialising the metadata topic after this long",
        min=1,
    )
    await_recovery: bool = setting(
        "remote.log.metadata.await.recovery",
        True,
        "Hold not ready the partitions whose segments a lost metadata topic held (the "
        "snapshot of its old topic id says which) until `remotelog recover` has written "
        "them back: served at once as empty, a leader election would move Kafka's log "
        "start offset past their whole tiered history. false: serve them at once",
    )
    snapshot_dir: str = setting(
        "remote.log.metadata.snapshot.dir",
        "~/.local/share/remotelog/metadata",
        "Directory of the materialised-state snapshots",
    )
    snapshot_interval_events: int = setting(
        "remote.log.metadata.snapshot.interval.events",
        100_000,
        "Write a snapshot after this many consumed events",
        min=1,
    )
    snapshot_interval_ms: int = setting(
        "remote.log.metadata.snapshot.interval.ms",
        60_000,
        "Write a snapshot at least this often when events arrived",
        min=1,
    )


READ_ONLY = "remote.log.metadata.read.only"


def refuse_write(what: str) -> ReadOnlyMetadataError:
    """The answer to any write of a read-only manager."""
    return ReadOnlyMetadataError(
        f"{what} refused: {READ_ONLY}=true, this manager only reads the metadata topic "
        "(its writer is the brokers' own RemoteLogMetadataManager)",
        metadata={"setting": READ_ONLY},
    )
