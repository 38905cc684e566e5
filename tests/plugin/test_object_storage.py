"""Kafka with the plugin over S3 behind object storage's link (support.s3_server's Link):
the store signs GET URLs and multipart uploads, the broker PUTs the segments it tiers
and reads them back from S3 itself, and a plain consumer reads the whole history once
through Kafka while the link answers some requests SlowDown and cuts some GETs off
midway. The plugin reads the logs ahead in chunks, and asks again, from the byte where a
cut read stopped, rather than falling back to the store's stream; it PUTs a part again
after a SlowDown. A GET that stops sending mid-body is asked again from the byte where it
stopped before its read's deadline, and holds none of Kafka's reader threads for good. A
store killed mid-copy loses nothing."""

import asyncio
import hashlib
import uuid

import pytest_asyncio
from fetch.conftest import FetchStack
from support.s3 import s3_client
from support.servers import S3Server
from support.services import started
from support.topics import read_to_end
from support.waiting import eventually

from remotelog.dev.broker import BrokerError, free_port

from .conftest import NOT_BY_URL, stop_brokers, tiering_broker
from .test_kafka_tiers import (
    PARTITIONS,
    STORAGE_METRICS,
    copied_past,
    create_tiered_topic,
    produce_plain,
    store_killed_mid_copy,
)

RECORDS = 6000  # 1 KiB each a partition: six 1 MiB segments
BY_HTTP = "Reading segment logs from the http: URLs the segment store hands out"
# A region's S3, near enough, and what it does under load: 5% of requests SlowDown,
# 5% of GETs cut off midway.
LINK = {"first_byte_ms": 20, "bandwidth_mb_s": 100}
FAULTS = {"slow_down_fraction": 0.05, "cut_fraction": 0.05, "seed": 405}
# Each read's deadline (the plugin's client.timeout.ms); a body silent for a third of it
# is asked again. A stalled GET stays silent past it.
READ_DEADLINE_MS = 10_000
STALL = {"mode": "stall", "method": "GET", "presigned": True, "delay_ms": 60_000}
READER_POOL = "org.apache.kafka.storage.internals.log:type=RemoteStorageThreadPool,name={}"
FETCH_ERRORS = "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchErrorsPerSec,topic={}"


@pytest_asyncio.fixture(scope="module")
async def over_s3(tmp_path_factory):
    """A broker whose plugin reads segments by the URLs an S3 store signs, that S3 behind
    the link."""
    tmp = tmp_path_factory.mktemp("object-storage")
    s3 = S3Server(**LINK)
    store, metadata = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    # Chunks of 128 KiB, eight to a segment: each fetch reads past its first chunk into
    # ones asked for ahead (with 1 MiB chunks a segment is one chunk, and a hit would
    # need Kafka to fetch from one segment twice).
    urls = {
        "rsm.config.fetch.urls.enabled": "true",
        "rsm.config.fetch.read.ahead.chunk.bytes": str(128 << 10),
        "rsm.config.copy.method": "url",
        "rsm.config.client.timeout.ms": str(READ_DEADLINE_MS),
    }
    broker = tiering_broker(tmp, store, metadata, {"jmx_port": free_port()}, **urls).start()
    stack = FetchStack(
        tmp,
        broker.bootstrap_servers,
        s3.endpoint,
        "s3",
        store_listen=store,
        metadata_listen=metadata,
        # A bucket that encrypts with KMS: its ETags are no MD5s, as on S3.
        store_settings={"storage.s3.sse": "aws:kms"},
    )
    try:
        async with started(stack):
            try:
                yield broker, s3, stack
            finally:
                await stop_brokers(broker)
    finally:
        broker.stop()
        s3.stop()


async def test_kafka_reads_its_history_from_s3_whole_through_slowdowns_and_cuts(over_s3):
    broker, s3, stack = over_s3
    bootstrap = broker.bootstrap_servers
    topic = f"s3-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(create_tiered_topic, bootstrap, topic)
    s3.link("POST", **LINK, **FAULTS)  # copies meet the faults too; the store retries
    values = await asyncio.to_thread(produce_plain, bootstrap, topic, RECORDS)
    await copied_past(broker, topic, RECORDS // 2)

    before = s3.link()
    for partition in range(PARTITIONS):
        messages = await asyncio.to_thread(read_to_end, bootstrap, topic, partition)
        assert [m.offset() for m in messages] == list(range(len(values[partition])))
        assert [m.value() for m in messages] == values[partition]
    after = s3.link()

    assert after["bytes_down"] - before["bytes_down"] > RECORDS * 1024
    faults = sum(after[k] - before[k] for k in ("slowed_down", "cut"))
    assert faults > 0, after
    log = broker.run_log()
    assert [line for line in log if BY_HTTP in line]
    # Every fault was ridden out on the URL, none by falling back to the store's stream.
    assert not [line for line in log if any(n in line for n in NOT_BY_URL)]
    # The broker PUT every segment it tiered, through the same SlowDowns.
    copies = [line for line in log if "Copied segment" in line and topic in line]
    assert copies
    assert all("to the segment store by url" in line for line in copies), copies[:3]
    s3.link("POST", **LINK)  # the check's own reads meet no faults
    encrypted_and_etags_not_md5s(s3, stack.bucket, topic)
    read_ahead = {
        name: sum((await asyncio.to_thread(broker.jmx, STORAGE_METRICS, attribute=name)).values())
        for name in (
            "read-ahead-chunks-total",
            "read-ahead-hits-total",
            "hedged-reads-total",
            "next-segments-prepared-total",
        )
    }
    # Kafka's fetches found chunks read ahead of them, fetched or on their way; a chunk
    # held up by a SlowDown's pause was asked a second time; segments were got ready
    # (looked up, their URLs and first chunks asked for) before Kafka crossed into them.
    assert all(count > 0 for count in read_ahead.values()), read_ahead


def encrypted_and_etags_not_md5s(s3: S3Server, bucket: str, topic: str) -> None:
    """Every object of the topic's copies is SSE-KMS encrypted, and a log's ETag (a
    single PUT's or a multipart upload's) is no MD5 of its bytes."""
    client = s3_client(s3.endpoint)
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=topic)
        for o in page.get("Contents", [])
    ]
    assert any(key.endswith(".log") for key in keys), keys[:3]
    for key in keys:
        head = client.head_object(Bucket=bucket, Key=key)
        assert head["ServerSideEncryption"] == "aws:kms", key
        if key.endswith(".log"):
            body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            assert head["ETag"].strip('"') != hashlib.md5(body).hexdigest(), key


def fetch_errors(broker, topic: str) -> float:
    """Kafka's count of the topic's failed remote fetches: 0 before its first, when Kafka
    has not made the meter yet."""
    try:
        return sum(broker.jmx(FETCH_ERRORS.format(topic)).values())
    except BrokerError as exc:
        if "No matched attributes" in str(exc):
            return 0
        raise


async def test_reads_that_stall_mid_body_go_on_and_hold_no_reader_thread(over_s3):
    """S3 stops sending halfway through a GET of each partition's history, its connection
    open. Each is asked again from where it stopped, within its read's deadline: Kafka's
    consumer gets every record, no remote fetch fails, nothing falls back to the stream,
    and Kafka's reader pool is idle again afterwards."""
    broker, s3, _ = over_s3
    bootstrap = broker.bootstrap_servers
    topic = f"stall-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(create_tiered_topic, bootstrap, topic)
    s3.link("POST", **LINK)
    values = await asyncio.to_thread(produce_plain, bootstrap, topic, RECORDS // 2)
    await copied_past(broker, topic, RECORDS // 4)
    for partition in range(PARTITIONS):
        s3.inject(count=1, **STALL)
        # A poll may wait out a stall and the GET asked again after it.
        messages = await asyncio.to_thread(
            read_to_end, bootstrap, topic, partition, poll_s=READ_DEADLINE_MS / 1000
        )
        assert [m.value() for m in messages] == values[partition]
        assert s3.pending_faults() == []  # the stall was met
    assert await asyncio.to_thread(fetch_errors, broker, topic) == 0
    log = broker.run_log()
    assert not [line for line in log if any(n in line for n in NOT_BY_URL)]

    async def reader_pool_idle() -> bool:
        def gauge(name: str) -> dict[str, float]:
            return broker.jmx(READER_POOL.format(name), attribute="Value")

        queued = await asyncio.to_thread(gauge, "RemoteLogReaderTaskQueueSize")
        idle = await asyncio.to_thread(gauge, "RemoteLogReaderAvgIdlePercent")
        return sum(queued.values()) == 0 and min(idle.values()) == 1.0

    # No reader thread is still held by a stalled GET (each stays silent for a minute).
    await eventually(reader_pool_idle, timeout_s=30, interval_s=1)


def s3_uploads_of(stack, topic: str):
    """Whether S3 holds a multipart upload of the topic under way: a check."""
    client = s3_client(stack.s3_endpoint)

    def under_way() -> bool:
        listing = client.list_multipart_uploads(Bucket=stack.bucket)
        return any(u["Key"].startswith(f"{topic}-") for u in listing.get("Uploads", []))

    return under_way


async def test_a_store_killed_mid_copy_by_url_loses_nothing(over_s3):
    """The store-kill test where the broker PUTs the segments to S3 itself: the store is
    killed while a part is on its way, so the copy cannot complete; Kafka deletes the
    attempt, which drops its multipart upload."""
    broker, s3, stack = over_s3
    s3.link("POST", **LINK)  # no faults: the copies are what is tested
    copies = await store_killed_mid_copy(broker, stack, s3_uploads_of)
    assert all("to the segment store by url" in line for line in copies), copies[:3]
