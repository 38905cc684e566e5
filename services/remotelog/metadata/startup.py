"""The metadata manager opened as a service runs it: the metadata topic made or checked,
the snapshot loaded, the Kafka clients made and handed to the manager, started."""

from __future__ import annotations

import asyncio

from remotelog.coordination.factory import open_leases
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.ports import SegmentDescriber
from remotelog.core.tasks import in_thread_until_cancelled
from remotelog.metadata.config import MetadataManagerConfig, refuse_write
from remotelog.metadata.manager import Producer, TopicBasedRemoteLogMetadataManager
from remotelog.metadata.restart import load_snapshot
from remotelog.metadata.topic import (
    METADATA_TOPIC,
    EndOfPartition,
    MetadataConsumer,
    MetadataProducer,
    Record,
    await_metadata_topic,
    ensure_metadata_topic,
)


class NoProducer:
    """The producer of a read-only manager: no Kafka producer is made at all."""

    async def publish(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        raise refuse_write("a metadata write")

    def close(self) -> None:
        return None


async def open_metadata_manager(
    config: MetadataManagerConfig,
    *,
    topic: str = METADATA_TOPIC,
    segments: SegmentDescriber | None = None,
) -> TopicBasedRemoteLogMetadataManager:
    """The manager, started, with the Kafka clients it is handed: the metadata topic made
    or checked first, the snapshot loaded, then its producer and consumer."""
    client_config = kafka_client_config(config)
    waits = {
        "topic": topic,
        "partitions": config.metadata_topic_num_partitions,
        "retry_interval_ms": config.initialization_retry_interval_ms,
        "max_timeout_ms": config.initialization_retry_max_timeout_ms,
    }
    if config.read_only:
        # The topic is its writer's to create, with its settings.
        info = await in_thread_until_cancelled(await_metadata_topic, client_config, **waits)
    else:
        info = await in_thread_until_cancelled(
            ensure_metadata_topic,
            client_config,
            replication_factor=config.metadata_topic_replication_factor,
            retention_ms=config.metadata_topic_retention_ms,
            compacted=config.keyed_records,
            **waits,
        )
    snapshot = load_snapshot(config, info, topic)
    producer: Producer = (
        NoProducer()
        if config.read_only
        else MetadataProducer(client_config, topic=topic, timeout_ms=config.consume_wait_ms)
    )
    manager: TopicBasedRemoteLogMetadataManager | None = None

    def sink(records: list[Record], ends: list[EndOfPartition]) -> None:
        assert manager is not None  # records come only once the manager started the consumer
        manager.store.on_records(records, ends)

    consumer = MetadataConsumer(
        client_config,
        topic=topic,
        loop=asyncio.get_running_loop(),
        sink=sink,
        fetch_wait_ms=config.consumer_fetch_wait_ms,
    )
    manager = TopicBasedRemoteLogMetadataManager(
        config,
        info,
        producer,
        consumer,
        topic_name=topic,
        snapshot=snapshot,
        recoveries=open_leases(config.redis_url),
        segments=segments,
    )
    try:
        await manager.start()
    except BaseException:
        await manager.close()
        raise
    return manager
