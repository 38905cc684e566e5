"""The bucket outlives the cluster: the metadata topic rebuilt by `remotelog recover`.

Apache Kafka tiers a topic through the plugin and local retention frees its disk.
Then `__remote_log_metadata` is deleted through the Admin API, as a lost topic leaves
things, and the manager restarts on a fresh, empty topic: it holds the partitions
its snapshot had segments of not ready, so the broker, restarted before the
recovery, leaves their log start offsets at 0. `remotelog recover` writes the
segments back from the manifests beside them, and Kafka serves the whole history
again, tiers on after it, and applies its retention to the recovered segments. Its
broker is restarted after the recovery: what it then serves comes from the recovered
topic alone. Last the cluster goes, data directory and all, and another Kafka's
metadata topic is enough for remotelog's readers to read the topic from the bucket by
name.
"""

import asyncio
import itertools
import shutil
import uuid
from dataclasses import replace

import pytest_asyncio
from support.kafka_admin import delete_topic_until_gone, set_topic_config
from support.recovery import run_recover
from support.topics import read_to_end
from support.waiting import eventually

from remotelog.client import TieredConsumer
from remotelog.core.model import TopicIdPartition
from remotelog.metadata.topic import METADATA_TOPIC
from remotelog.segmentstore.layout import SegmentKeys

from .conftest import BY_PATH, FILE_URLS, SEGMENT_BYTES, stop_brokers, tiering_stack
from .test_kafka_tiers import (
    PARTITIONS,
    agreed_tiered_ends,
    create_tiered_topic,
    live_segments,
    produce_every_kind,
    retention_settled,
    served_through_kafka,
    wait_for_offsets,
    wait_until_tiered,
)

MORE_RECORDS = 1200  # per partition after the recovery: a segment and more


@pytest_asyncio.fixture(scope="module")
async def kafka_recovering(tmp_path_factory, s3_endpoint):
    """Its own broker and services: the test deletes their metadata topic."""
    tmp = tmp_path_factory.mktemp("kafka-recovering")
    async with tiering_stack(tmp, s3_endpoint, **FILE_URLS, **BY_PATH) as tiering:
        yield tiering


def lineage(segments) -> list[tuple[int, int]]:
    """A partition's (start, end) offsets, ascending."""
    return sorted((s.start_offset, s.end_offset) for s in segments)


async def lose_the_metadata_topic(broker, stack) -> None:
    """The manager stopped, its topic deleted through the Admin API (the controller, in
    KRaft); then started again, on a new empty topic, its snapshots (of the old topic id)
    still on its disk."""
    await stack.stop_metadata()
    await asyncio.to_thread(delete_topic_until_gone, broker.bootstrap_servers, METADATA_TOPIC)
    await stack.start_metadata()


async def led_again_before_the_recovery(broker, stack, topic_id, topic: str) -> None:
    """The broker restarted (each partition's leader elected again), and Kafka's tasks
    told twice per partition that it is not ready: by the first answer a ready partition
    would have had its log start offset moved past the tiered history."""
    await asyncio.to_thread(broker.stop)
    stack.metadata.manager.recovery_awaited.clear()
    await asyncio.to_thread(broker.start)
    tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]
    awaited = stack.metadata.manager.recovery_awaited
    await eventually(lambda: all(awaited.get(tip, 0) >= 2 for tip in tips), timeout_s=60)


async def test_kafka_serves_and_tiers_on_after_its_metadata_topic_is_lost_and_recovered(
    kafka_recovering,
):
    broker, stack = kafka_recovering.broker, kafka_recovering.stack
    bootstrap = broker.bootstrap_servers
    topic = f"recovered-{uuid.uuid4().hex[:6]}"
    topic_id = await asyncio.to_thread(create_tiered_topic, bootstrap, topic)
    produced = await asyncio.to_thread(produce_every_kind, bootstrap, topic)
    await asyncio.to_thread(wait_until_tiered, broker, topic)
    ends = await agreed_tiered_ends(broker, stack, topic_id, topic)
    tiered = await live_segments(stack, topic_id, topic)

    await lose_the_metadata_topic(broker, stack)
    assert await live_segments(stack, topic_id, topic) == {p: [] for p in range(PARTITIONS)}
    # The manager holds the partitions its snapshot had segments of: a leader elected
    # before the recovery leaves Kafka's log start offset where it was.
    await led_again_before_the_recovery(broker, stack, topic_id, topic)
    earliest = await asyncio.to_thread(broker.list_offsets, topic, "-2")
    assert earliest == dict.fromkeys(range(PARTITIONS), 0)

    lines = await run_recover(stack)
    written = [line for line in lines if line.startswith("wrote  ")]
    assert len(written) == sum(len(s) for s in tiered.values())
    assert [line for line in lines if line.startswith(("gap  ", "overlap  ", "skipped  "))] == []
    recovered = await live_segments(stack, topic_id, topic)
    for partition in range(PARTITIONS):
        # Every segment as Kafka's RLMM had it: ids, offsets, epochs, custom metadata.
        # The time of its FINISHED record is its copy's start, the manifest's: Kafka's
        # own came when the copy returned. Retention goes by max_timestamp_ms.
        for found, lost in zip(recovered[partition], tiered[partition], strict=True):
            assert found.event_timestamp_ms <= lost.event_timestamp_ms
            assert found == replace(lost, event_timestamp_ms=found.event_timestamp_ms)

    # The broker restarted, so that nothing of the lost topic is left in its plugin:
    # leading again, Kafka finds its log start at the first recovered segment (its
    # checkpoint says 0 too), and serves the history through the plugin from what was
    # recovered, under both isolation levels.
    await asyncio.to_thread(broker.stop)
    await asyncio.to_thread(broker.start)
    await served_through_kafka(broker, topic, produced)

    # Kafka tiers on after the recovered segments: no gap, no duplicate.
    more = await asyncio.to_thread(
        produce_every_kind,
        bootstrap,
        topic,
        codecs=("zstd",),
        records=MORE_RECORDS,
        tail_records=MORE_RECORDS,
    )
    produced.extend(more)
    await asyncio.to_thread(
        wait_for_offsets,
        broker,
        topic,
        "latest-tiered",
        lambda found: all(found[p] > ends[p] for p in range(PARTITIONS)),
        "tiered after the recovery",
    )
    await agreed_tiered_ends(broker, stack, topic_id, topic)
    after = await live_segments(stack, topic_id, topic)
    for partition in range(PARTITIONS):
        offsets = lineage(after[partition])
        assert len(offsets) > len(tiered[partition])
        assert offsets[0][0] == 0
        for (_, end), (start, _) in itertools.pairwise(offsets):
            assert start == end + 1, offsets
        ids = [s.remote_log_segment_id for s in after[partition]]
        assert len(set(ids)) == len(ids)
    await served_through_kafka(broker, topic, produced)

    # Remote retention by size deletes the oldest recovered segments, through the plugin.
    await asyncio.to_thread(
        set_topic_config, bootstrap, topic, "retention.bytes", str(2 * SEGMENT_BYTES)
    )

    earliest, live = await retention_settled(broker, stack, topic_id, topic)
    for partition in range(PARTITIONS):
        kept = {s.remote_log_segment_id for s in live[partition]}
        deleted = [s for s in recovered[partition] if s.remote_log_segment_id not in kept]
        assert deleted, f"{topic}-{partition}: no recovered segment deleted"
        assert max(s.end_offset for s in deleted) < earliest[partition]
        objects = stack.objects_of(deleted[0].topic_id_partition)
        for segment in deleted:  # the manifest first, then the rest of its objects
            keys = SegmentKeys.of("", segment)
            assert {keys.manifest, keys.log} & set(objects) == set()


async def test_an_archive_is_read_by_name_with_its_cluster_gone(kafka_recovering, broker, spark):
    """Only the bucket is left: the broker's data directory is deleted. Another Kafka
    (the session's) holds the metadata topic `recover` writes, and the topic, which no
    cluster knows any more, is read by name from the remote tier."""
    original, stack = kafka_recovering.broker, kafka_recovering.stack
    topic = f"archived-{uuid.uuid4().hex[:6]}"
    topic_id = await asyncio.to_thread(create_tiered_topic, original.bootstrap_servers, topic)
    await asyncio.to_thread(
        produce_every_kind, original.bootstrap_servers, topic, codecs=("snappy", "zstd")
    )
    await asyncio.to_thread(wait_until_tiered, original, topic)
    ends = await agreed_tiered_ends(original, stack, topic_id, topic)
    tiered = sum(len(s) for s in (await live_segments(stack, topic_id, topic)).values())
    served = {}  # what the cluster served of its tiered range, aborted records too
    for partition in range(PARTITIONS):
        messages = await asyncio.to_thread(
            read_to_end, original.bootstrap_servers, topic, partition
        )
        served[partition] = [
            (m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])
            for m in messages
            if m.offset() <= ends[partition]
        ]

    await stop_brokers(original)
    await asyncio.to_thread(original.wipe)
    for service in list(stack.running):
        await stack.stop_service(service)  # the fetch service: nothing of it stays
    await stack.stop_metadata()
    shutil.rmtree(stack.tmp / "metadata" / "snapshots", ignore_errors=True)
    stack.bootstrap = broker.bootstrap_servers
    await stack.start_metadata()
    lines = await run_recover(stack, "--topic", topic)
    assert sum(line.startswith("wrote  ") for line in lines) == tiered  # one line a segment
    fetch = await stack.start_fetch()

    async with TieredConsumer.connect(
        f"127.0.0.1:{fetch.service.port}", f"127.0.0.1:{stack.metadata.service.port}"
    ) as consumer:
        found = await consumer.partitions(topic)
        # The topic's id and its tiered range, from the recovered metadata alone.
        assert [(s.topic_id_partition, s.latest_tiered_offset) for s in found] == [
            (TopicIdPartition(topic_id, topic, p), ends[p]) for p in range(PARTITIONS)
        ]
        for summary in found:
            records = [r async for r in consumer.read(summary.topic_id_partition, "earliest")]
            read = [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in records]
            assert read == served[summary.topic_id_partition.partition]

    frame = (
        spark.read.format("remotelog")
        .option("remotelog.fetch.address", f"127.0.0.1:{fetch.service.port}")
        .option("remotelog.metadata.address", f"127.0.0.1:{stack.metadata.service.port}")
        .option("includeHeaders", "true")
        .option("subscribe", topic)
        .load()
    )
    rows = await asyncio.to_thread(
        frame.select("partition", "offset", "key", "value", "headers", "timestamp").collect
    )
    for partition in range(PARTITIONS):
        read = sorted(
            (
                r.offset,
                r.key,
                r.value,
                tuple((h.key, h.value) for h in r.headers or ()),
                round(r.timestamp.timestamp() * 1000),
            )
            for r in rows
            if r.partition == partition
        )
        assert read == served[partition]
