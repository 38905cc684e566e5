"""Bulk reads by URL: LocateOffsetRange's byte ranges, and a TieredConsumer reading S3 itself
while the fetch service serves none of the bytes."""

import logging
import urllib.request
import uuid

import pytest
import pytest_asyncio
from support.telemetry import counter

from remotelog.client import TieredConsumer
from remotelog.client.url_ranges import UrlRangeReader
from remotelog.core import metrics as m
from remotelog.core.errors import InvalidArgumentError, UnsupportedOperationError
from remotelog.kafka.consumer_records import fetched_records
from remotelog.kafka.records import iter_batches

from .conftest import BIG_BATCH_BYTES, batch
from .test_spark_source import expected, rows, source
from .test_tiered_consumer import addresses, direct, read_all

FETCH_SCOPE = "remotelog.fetch"


def ranged_get(url: str, start: int, end: int) -> bytes:
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-{end - 1}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read()


def served_bytes(reader) -> int:
    """What the fetch services have served (ReadOffsetRange and Fetch) so far."""
    return counter(reader, m.REMOTE_FETCH_BYTES.name, None, FETCH_SCOPE) or 0


async def test_located_ranges_are_the_batches_of_the_range_and_no_more(tiered):
    client = tiered.running[0].client
    tip = tiered.tip("txns")
    if tiered.backend == "filesystem":
        with pytest.raises(UnsupportedOperationError, match=r"storage\.s3\.fetch\.url\.expiry\.ms"):
            await client.locate_offset_range(tip, 0, 9)
        return
    first_log, second_log = (s.log for s in tiered.partitions["txns"][1])
    # [5, 9): the end of the first segment (offsets 0-7) and the first batch of the second.
    first, second = await client.locate_offset_range(tip, 5, 9)
    assert (first.segment.start_offset, second.segment.start_offset) == (0, 8)
    batches = {h.base_offset: h for h in iter_batches(first_log)}
    # The transactional log indexes every batch but the first (at its last offset): the
    # range starts at the entry at or before 5, batch 3-4's, and ends at a batch boundary.
    assert (first.start_position, first.end_position) == (batches[3].position, len(first_log))
    # The index cannot tell whether the batch at its first entry at or past 8 (the marker
    # at 10) holds 8: the range ends at the next entry's batch, 11-12.
    second_batches = {h.base_offset: h for h in iter_batches(second_log)}
    assert (second.start_position, second.end_position) == (0, second_batches[11].position)
    data = [ranged_get(r.url, r.start_position, r.end_position) for r in (first, second)]
    assert data == [first_log[first.start_position :], second_log[: second.end_position]]
    records = [
        r.offset
        for chunk in data
        for r in fetched_records(chunk, tip.topic, 0, start_offset=5, end_offset=9).records()
    ]
    assert records == [5, 6, 8]  # 7 is a commit marker
    # At most as many segments as asked for; none past the range.
    (only,) = await client.locate_offset_range(tip, 0, None, max_segments=1)
    assert (only.segment.start_offset, only.end_position) == (0, len(first_log))
    assert [r.segment.start_offset for r in await client.locate_offset_range(tip, 0, 8)] == [0]
    # One request fans out to 64 segments at most (their index GETs and URL signatures).
    for refused in (65, -1):
        with pytest.raises(InvalidArgumentError, match=r"max_segments: must be from 0 to 64"):
            await client.locate_offset_range(tip, 0, None, max_segments=refused)


@pytest_asyncio.fixture(scope="module")
async def large(tiered):
    """10 MiB in one segment: more than one ranged GET, each more than one piece."""
    return await tiered.tier_batches("large", [[batch(n, size=BIG_BATCH_BYTES) for n in range(40)]])


@pytest.mark.parametrize("name", ["topic_a", "gapped", "big_batches", "large"])
async def test_a_consumer_reads_s3_itself_and_the_fetch_service_serves_no_byte(
    tiered, large, name, telemetry, s3_server
):
    reader, _ = telemetry
    before = served_bytes(reader)
    s3_server.link("POST", first_byte_ms=0, bandwidth_mb_s=1000)
    try:
        async with TieredConsumer.connect(*addresses(tiered)) as consumer:
            records = await read_all(consumer, tiered.tip(name))
        link = s3_server.link()
    finally:
        s3_server.link("DELETE")
    assert records == direct(tiered, name)
    assert link is not None
    if tiered.backend == "s3":
        assert served_bytes(reader) == before
        assert link["bytes_down"] >= len(tiered.log_bytes(name))
    else:  # no URLs from a filesystem store: the fetch service reads it
        assert served_bytes(reader) - before >= len(tiered.log_bytes(name))
        assert link["bytes_down"] == 0


async def test_failed_gets_resume_and_a_refused_url_leaves_the_rest_to_the_service(
    tiered, large, telemetry, s3_server, caplog
):
    if tiered.backend == "filesystem":
        pytest.skip("a filesystem store signs no URLs")
    reader, _ = telemetry
    expected = direct(tiered, "large")
    before = served_bytes(reader)
    # A 503 SlowDown and GETs cut off midway are asked again from the byte they reached.
    s3_server.inject(mode="503", count=2, method="GET", presigned=True)
    s3_server.inject(mode="truncate", count=2, method="GET", presigned=True)
    async with TieredConsumer.connect(*addresses(tiered)) as consumer:
        assert await read_all(consumer, tiered.tip("large")) == expected
    assert s3_server.pending_faults() == []
    assert served_bytes(reader) == before
    # Refused every time (an expired URL): the fetch service reads what is left, once each.
    s3_server.inject(mode="403", count=1000, method="GET", presigned=True)
    try:
        with caplog.at_level(logging.WARNING, "remotelog.client.tiered_consumer"):
            async with TieredConsumer.connect(*addresses(tiered)) as consumer:
                records = await read_all(consumer, tiered.tip("large"))
    finally:
        s3_server.clear_faults()
    assert records == expected
    assert served_bytes(reader) - before >= len(tiered.log_bytes("large"))
    assert "through the fetch service: " in caplog.text
    assert "Signature=" not in caplog.text


async def test_a_get_slower_than_the_readers_recent_ones_is_hedged(tiered, large, s3_server):
    """After 80 GETs of 128 KiB (the 40 batches of "large"), one answered five seconds late
    is asked again; the second
    answers first, the late one is cancelled, and the bytes are the log's."""
    if tiered.backend == "filesystem":
        pytest.skip("a filesystem store signs no URLs")
    client = tiered.running[0].client
    urls = UrlRangeReader(client, range_bytes=128 * 1024, timeout_s=30)

    async def read() -> bytes:
        return b"".join(
            [b"".join(pieces) async for _, pieces in urls.ranges(tiered.tip("large"), 0, 40)]
        )

    try:
        log = tiered.log_bytes("large")
        assert await read() == log
        # Loopback has its slowest 5% too: those were hedged already.
        hedged, won = urls.hedged, urls.hedges_won
        s3_server.inject(mode="slow", delay_ms=5000, count=1, method="GET", presigned=True)
        assert await read() == log
        assert s3_server.pending_faults() == []
        assert urls.hedges_won > won
        assert urls.hedged - hedged >= urls.hedges_won - won
        # Off: no GET is hedged, however late.
        with pytest.raises(InvalidArgumentError, match="hedge_percentile"):
            UrlRangeReader(client, hedge_percentile=101)
    finally:
        await urls.close()


async def test_spark_tasks_read_s3_themselves_unless_told_not_to(
    tiered, spark, telemetry, s3_server
):
    if tiered.backend == "filesystem":
        pytest.skip("a filesystem store signs no URLs")
    reader, _ = telemetry
    topic = f"spark-urls-{uuid.uuid4().hex[:8]}"
    await tiered.tier_batches(topic, [[batch(n, size=BIG_BATCH_BYTES) for n in range(40)]])
    before = served_bytes(reader)
    s3_server.link("POST", first_byte_ms=0, bandwidth_mb_s=1000)
    try:
        by_url = await rows(source(spark, tiered, subscribe=topic))
        link = s3_server.link()
    finally:
        s3_server.link("DELETE")
    assert by_url == expected(tiered, topic)
    assert served_bytes(reader) == before
    assert link is not None
    assert link["bytes_down"] >= len(tiered.log_bytes(topic))
    frame = source(spark, tiered, subscribe=topic, **{"remotelog.fetchUrls": "false"})
    assert await rows(frame) == by_url
    assert served_bytes(reader) - before >= len(tiered.log_bytes(topic))
