"""Partition remover fixtures: the real S3 store, metadata manager and removers over Kafka."""

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest_asyncio
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from support.services import (
    CLIENT_OPTIONS,
    PARTITIONS,
    BackendStack,
    ServiceRunning,
    load_properties,
    service_properties,
    started,
)
from support.tiering import batch, tier_segment
from support.topics import read_to_end

from remotelog.client import PartitionRemoverClient
from remotelog.core.metadata_serde import deserialize, serialize
from remotelog.core.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from remotelog.core.partitioner import metadata_partition
from remotelog.metadata.topic import METADATA_TOPIC
from remotelog.remover.config import PartitionRemoverConfig
from remotelog.remover.server import start_partition_remover


def remover_settings(
    bootstrap: str, group_id: str, reach: dict[str, str], **extra: str
) -> dict[str, str]:
    """A test remover's properties; `reach` says where the store and the manager are."""
    return {
        **reach,
        "bootstrap.servers": bootstrap,
        "remote.log.metadata.topic.num.partitions": str(PARTITIONS),
        "remote.log.metadata.consumer.fetch.max.wait.ms": "10",
        "remote.partition.remover.consumer.group.id": group_id,
        "remote.partition.remover.lease.ms": "1000",
        "remote.partition.remover.rpc.timeout.ms": "10000",
        "remote.log.manager.task.retry.backoff.ms": "20",
        "remote.log.manager.task.retry.backoff.max.ms": "200",
        **extra,
    }


def remover_properties(stack, **extra: str) -> dict[str, str]:
    reach = stack.service_properties()
    return remover_settings(stack.bootstrap, stack.group_id, reach, **stack.kafka_settings, **extra)


def remover_config_beside(
    tmp: Path, bootstrap: str, store_port: int, metadata_port: int, **extra: str
) -> PartitionRemoverConfig:
    """A remover's config for a store and a metadata manager a test started itself."""
    group_id = f"remover-{uuid.uuid4().hex[:8]}"
    reach = service_properties(store_port, metadata_port)
    properties = remover_settings(bootstrap, group_id, reach, **extra)
    return load_properties(PartitionRemoverConfig, tmp / "remover.properties", properties)


@dataclass
class RemoverStack(BackendStack):
    backend: str = "s3"
    # Each stack has its own progress, so earlier tests' commits do not move it.
    group_id: str = field(default_factory=lambda: f"remover-{uuid.uuid4().hex[:8]}")

    def config(self, name: str = "remover", **extra: str) -> PartitionRemoverConfig:
        path = self.tmp / f"{name}.properties"
        return load_properties(PartitionRemoverConfig, path, remover_properties(self, **extra))

    async def start_remover(self, name: str = "remover", **extra: str):
        service = await start_partition_remover(self.config(name, **extra))
        client = PartitionRemoverClient(f"127.0.0.1:{service.port}", options=CLIENT_OPTIONS)
        return self.started(ServiceRunning(service, client))

    # -- data -------------------------------------------------------------------------

    async def tier(self, tip: TopicIdPartition, segments: int) -> list[RemoteLogSegmentMetadata]:
        """`segments` tiered segments of 10 records each, COPY_SEGMENT_FINISHED."""
        tiered = []
        for number in range(segments):
            log = batch(number * 10, 10, size=100)
            segment = await tier_segment(
                self.store.client, self.metadata.client, tip, log, {}, start_offset=number * 10
            )
            tiered.append(segment.metadata)
        return tiered

    def committed(self, tip: TopicIdPartition) -> int:
        """The removers' committed offset of the partition's metadata partition."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group_id})
        try:
            part = metadata_partition(tip, PARTITIONS)
            found = consumer.committed([KafkaTopicPartition(METADATA_TOPIC, part)], timeout=10)
            return found[0].offset
        finally:
            consumer.close()


def events_of(bootstrap: str, tip: TopicIdPartition) -> list[tuple[int, object]]:
    """(offset, event) of each metadata-topic record about `tip`, as Kafka's tools read them."""
    found = []
    for message in read_to_end(bootstrap, METADATA_TOPIC, metadata_partition(tip, PARTITIONS)):
        event = deserialize(message.value())
        about = (
            event.topic_id_partition
            if isinstance(event, RemotePartitionDeleteMetadata)
            else event.remote_log_segment_id.topic_id_partition
        )
        if about == tip:
            found.append((message.offset(), event))
    return found


def publish_raw(bootstrap: str, event: RemotePartitionDeleteMetadata) -> None:
    """Write a deletion event straight onto the metadata topic, as a controller would."""
    producer = Producer({"bootstrap.servers": bootstrap})
    part = metadata_partition(event.topic_id_partition, PARTITIONS)
    producer.produce(METADATA_TOPIC, serialize(event), partition=part)
    assert producer.flush(10) == 0


def lifecycle(events) -> list[str]:
    """The events as state names; segment events carry the segment's start offset."""
    names = []
    for _, event in events:
        if isinstance(event, RemotePartitionDeleteMetadata):
            names.append(event.state.name)
        elif isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
            names.append(f"{event.state.name}@{event.remote_log_segment_id.id}")
    return names


@pytest_asyncio.fixture
async def stack(tmp_path, broker, s3_endpoint):
    async with started(RemoverStack(tmp_path, broker.bootstrap_servers, s3_endpoint)) as running:
        yield running
