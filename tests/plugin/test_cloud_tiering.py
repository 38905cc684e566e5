"""Kafka with the plugin tiers a topic to Google Cloud Storage and to Azure Blob Storage
(their emulators): the broker PUTs each segment by the URLs the store signs (GCS: V4
URLs of part objects the store composes; Azure: SAS Put Blocks it commits), local
retention frees the disk, consumers read the history back under both isolation levels
with the plugin reading by signed URL, Spark's tasks read the bucket by signed URLs
themselves, `remotelog recover` rebuilds the lost metadata from the bucket, and deleting
the topic empties it."""

import asyncio
import uuid
from dataclasses import replace

import pytest_asyncio
from confluent_kafka.admin import AdminClient
from support.recovery import run_recover
from support.waiting import eventually

from remotelog.core.model import TopicIdPartition
from remotelog.segmentstore.gcs import STAGING

from .conftest import tiering_stack
from .test_encrypted_tiering import BY_URL, served_bytes
from .test_kafka_tiers import (
    PARTITIONS,
    TIERING_TIMEOUT_S,
    agreed_tiered_ends,
    create_tiered_topic,
    live_segments,
    produce_every_kind,
    served_through_kafka,
    wait_until_tiered,
)
from .test_recovery import lose_the_metadata_topic


@pytest_asyncio.fixture(scope="module", params=["gcs", "azure"])
async def cloud_tiering(request, tmp_path_factory, s3_endpoint, cloud_emulators):
    tmp = tmp_path_factory.mktemp(f"{request.param}-tiering")
    async with tiering_stack(
        tmp, s3_endpoint, backend=request.param, emulators=cloud_emulators, **BY_URL
    ) as tiering:
        yield tiering


async def test_kafka_tiers_to_the_cloud_by_url_and_reads_recovers_and_deletes_it(
    cloud_tiering, spark, telemetry
):
    broker, stack = cloud_tiering.broker, cloud_tiering.stack
    bootstrap = broker.bootstrap_servers
    topic = f"clouded-{uuid.uuid4().hex[:6]}"
    topic_id = await asyncio.to_thread(create_tiered_topic, bootstrap, topic)
    produced = await asyncio.to_thread(
        produce_every_kind, bootstrap, topic, ("none", "zstd"), 400, 400
    )
    await asyncio.to_thread(wait_until_tiered, broker, topic)  # the local disk freed
    await served_through_kafka(broker, topic, produced)
    log = broker.run_log()
    copies = [line for line in log if "Copied segment" in line and topic in line]
    assert copies
    assert all("to the segment store by url" in line for line in copies), copies[:3]
    assert any("Reading segment logs from the http" in line for line in log)
    tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]
    for tip in tips:  # in the bucket, and no part object or block left over
        objects = stack.objects_of(tip)
        assert objects
        assert [key for key in objects if STAGING in key] == []
    assert stack.store.incomplete_uploads() == 0
    report = await stack.scrub()
    assert (report.orphans, report.uploads) == ([], [])

    # Spark's tasks read the bucket by the URLs the store signs: the fetch service serves
    # no record byte (read_uncommitted; read_committed takes the fetch service's Fetch).
    frame = (
        spark.read.format("remotelog")
        .option("remotelog.fetch.address", f"127.0.0.1:{stack.running[0].service.port}")
        .option("remotelog.metadata.address", f"127.0.0.1:{stack.metadata.service.port}")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    served_before = served_bytes(telemetry[0])
    rows = await asyncio.to_thread(frame.select("partition", "offset", "key", "value").collect)
    assert served_bytes(telemetry[0]) == served_before
    for partition in range(PARTITIONS):
        found = [
            (r.key, r.value)
            for r in sorted(rows, key=lambda r: r.offset)
            if r.partition == partition
        ]
        expected = produced.expected(partition, committed_only=False)
        assert found == [(key, value) for key, value, _ in expected]

    # The metadata topic lost; `remotelog recover` writes every segment back from the
    # manifests in the bucket, as Kafka's RLMM had it.
    await agreed_tiered_ends(broker, stack, topic_id, topic)
    tiered = await live_segments(stack, topic_id, topic)
    await lose_the_metadata_topic(broker, stack)
    assert await live_segments(stack, topic_id, topic) == {p: [] for p in range(PARTITIONS)}
    lines = await run_recover(stack)
    written = [line for line in lines if line.startswith("wrote  ")]
    assert len(written) == sum(len(s) for s in tiered.values())
    recovered = await live_segments(stack, topic_id, topic)
    for partition in range(PARTITIONS):
        for found, lost in zip(recovered[partition], tiered[partition], strict=True):
            assert found == replace(lost, event_timestamp_ms=found.event_timestamp_ms)

    # Deleting the topic deletes its remote segments: the bucket holds nothing of it.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    await asyncio.to_thread(admin.delete_topics([topic])[topic].result, 30)

    async def emptied() -> bool:
        return all(stack.objects_of(tip) == {} for tip in tips)

    await eventually(emptied, timeout_s=TIERING_TIMEOUT_S)
    report = await stack.scrub()
    assert (report.orphans, report.uploads) == ([], [])
