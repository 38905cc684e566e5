"""KIP-1266's compacted `__remote_log_metadata`: records keyed by a 37-byte
RemoteLogSegmentMetadataKey and null-value tombstones at DELETE_SEGMENT_FINISHED,
written when `remote.log.metadata.keyed.records.enabled` says so and read either way.

Keys are built here from the KIP's schema (topic id, partition, segment id, state,
big-endian), not from the code under test."""

import random
import struct
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from support.services import PARTITIONS

from remotelog.core.metadata_keys import RemoteLogSegmentMetadataKey, record_key, tombstone_keys
from remotelog.core.metadata_serde import deserialize, serialize
from remotelog.core.model import RemoteLogSegmentMetadataUpdate
from remotelog.core.partitioner import metadata_partition

from .histories import answers, fresh_topic, partitions, until_ready, write_history
from .scenarios import COPIED, COPY_STARTED, DELETED, DELETING, Seg, metadata_of, update_of

KIP_KEY = struct.Struct(">16si16sB")
KEYED = {"remote.log.metadata.keyed.records.enabled": "true"}


def kip_key(topic_id: uuid.UUID, partition: int, segment_id: uuid.UUID, state) -> bytes:
    return KIP_KEY.pack(topic_id.bytes, partition, segment_id.bytes, state.value)


def test_keys_are_the_kips_37_bytes_and_a_deletion_tombstones_the_earlier_states():
    (tip,) = partitions(1)
    metadata = metadata_of(tip, Seg("k", 0, 9, {0: 0}))
    segment_id = metadata.remote_log_segment_id.id
    assert record_key(metadata) == kip_key(tip.topic_id, tip.partition, segment_id, COPY_STARTED)
    assert len(record_key(metadata)) == 37
    deleted = update_of(metadata, DELETED)
    assert record_key(deleted) == kip_key(tip.topic_id, tip.partition, segment_id, DELETED)
    assert tombstone_keys(deleted) == [
        kip_key(tip.topic_id, tip.partition, segment_id, s)
        for s in (COPY_STARTED, COPIED, DELETING)
    ]
    assert tombstone_keys(update_of(metadata, DELETING)) == []
    parsed = RemoteLogSegmentMetadataKey.parse(record_key(deleted))
    assert (parsed.topic_id, parsed.partition, parsed.segment_id, parsed.state) == (
        tip.topic_id,
        tip.partition,
        segment_id,
        DELETED.value,
    )
    with pytest.raises(ValueError, match="37 bytes, not 36"):
        RemoteLogSegmentMetadataKey.parse(bytes(36))


def read_topic(bootstrap: str, topic: str) -> list:
    """Every record of `topic`, from its start to its end: (key, value) pairs."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "keyed-test", "enable.auto.commit": False}
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in parts
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        records, left = [], {p for p, end in ends.items() if end > 0}
        while left:
            message = consumer.poll(10)
            assert message is not None, f"partitions {left} not read to their end"
            assert message.error() is None, message.error()
            records.append((message.key(), message.value()))
            if message.offset() + 1 >= ends[message.partition()]:
                left.discard(message.partition())
        return records
    finally:
        consumer.close()


async def test_a_keyed_writer_keys_every_record_and_either_reader_reads_them(started, broker):
    topic = fresh_topic()
    tips = partitions(2)
    writer = await started("keyed-writer", topic, **KEYED)
    await until_ready(writer, tips)
    for number, tip in enumerate(tips):
        await write_history(writer, tip, random.Random(number + 5), 14, "k")
    expected = await answers(writer, tips)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact,delete"

    records = read_topic(broker.bootstrap_servers, topic)
    tombstones = {key for key, value in records if value is None}
    finished = []
    for key, value in records:
        if value is None:
            continue
        event = deserialize(value)
        segment = event.remote_log_segment_id
        tip = segment.topic_id_partition
        assert key == kip_key(tip.topic_id, tip.partition, segment.id, event.state)
        if isinstance(event, RemoteLogSegmentMetadataUpdate) and event.state is DELETED:
            finished.append(segment)
    assert finished  # the histories deleted some segments
    assert tombstones == {
        kip_key(s.topic_id_partition.topic_id, s.topic_id_partition.partition, s.id, state)
        for s in finished
        for state in (COPY_STARTED, COPIED, DELETING)
    }

    # Whichever format a reader writes in, it reads the keyed topic alike.
    for name, extra in (("unkeyed-reader", {}), ("keyed-reader", KEYED)):
        reader = await started(name, topic, **extra)
        await until_ready(reader, tips)
        assert await answers(reader, tips) == expected


async def test_what_compaction_leaves_of_a_kafka_rlmms_topic_reads_as_the_full_history(
    started, broker
):
    """Records as a KIP-1266 Kafka writes them, and what compaction leaves: a deleted
    segment's DELETE_SEGMENT_FINISHED alone, beside the tombstones of its earlier keys."""
    topic = fresh_topic()
    (tip,) = partitions(1)
    kept = metadata_of(tip, Seg("kept", 0, 99, {0: 0}))
    gone = metadata_of(tip, Seg("gone", 100, 199, {0: 100}))
    gone_id = gone.remote_log_segment_id.id
    part = metadata_partition(tip, PARTITIONS)
    writer = await started("creates-the-topic", topic)  # an unkeyed writer creates it
    await until_ready(writer, [tip])
    await writer.close()

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    compacted = [
        (kip_key(tip.topic_id, tip.partition, kept.remote_log_segment_id.id, COPY_STARTED), kept),
        (kip_key(tip.topic_id, tip.partition, kept.remote_log_segment_id.id, COPIED), None),
        (kip_key(tip.topic_id, tip.partition, gone_id, DELETED), update_of(gone, DELETED)),
    ]
    for key, event in compacted:
        if event is None:
            event = update_of(kept, COPIED)
        producer.produce(topic, key=key, value=serialize(event), partition=part)
    for state in (COPY_STARTED, COPIED, DELETING):
        producer.produce(
            topic,
            key=kip_key(tip.topic_id, tip.partition, gone_id, state),
            value=None,
            partition=part,
        )
    assert producer.flush(10) == 0

    reader = await started("reads-kafkas", topic)
    await until_ready(reader, [tip])
    listed = reader.remote_log_segments(tip)
    assert [(m.remote_log_segment_id.id, m.state) for m in listed] == [
        (kept.remote_log_segment_id.id, COPIED)
    ]
    assert await reader.remote_log_segment_metadata(tip, 0, 150) is None
