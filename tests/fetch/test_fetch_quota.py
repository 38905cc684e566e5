"""KIP-956's fetch quota (`remote.log.manager.fetch.max.bytes.per.second`): a fetch
service kept busy reads at the bound, within 20% over a few seconds, whether by
Fetch (answered empty while the rate is above it) or by ReadOffsetRange (paced),
and reports how long it held reads back (RemoteFetchThrottleTime)."""

import time

import pytest_asyncio
from support.services import started
from support.telemetry import metric_points
from support.tiering import batch

from remotelog.client import FetchPartition
from remotelog.core import metrics as m

from .conftest import FetchStack

BOUND = 200_000  # bytes a second
RECORDS = 500  # 50 batches of 10 records of 1,000 bytes: about 500 KB
QUOTA = {
    "remote.log.manager.fetch.max.bytes.per.second": str(BOUND),
    # Kafka's 11 windows would let a few seconds' run read ahead of the bound.
    "remote.log.manager.fetch.quota.window.num": "2",
    "remote.log.manager.fetch.quota.window.size.seconds": "1",
}


@pytest_asyncio.fixture
async def quota_stack(tmp_path, broker, s3_endpoint, telemetry):
    async with started(FetchStack(tmp_path, broker.bootstrap_servers, s3_endpoint)) as stack:
        batches = [batch(base, 10, size=1_000) for base in range(0, RECORDS, 10)]
        tip = await stack.tier_batches("quota", [batches])
        yield stack, tip


def throttled_ms(reader) -> float:
    return sum(p.sum for p in metric_points(reader, m.REMOTE_FETCH_THROTTLE_TIME.name))


async def test_fetches_read_at_the_quota(quota_stack, telemetry):
    stack, tip = quota_stack
    reader, _ = telemetry
    fetch = await stack.start_fetch(**QUOTA, **{"remote.fetch.max.wait.ms": "200"})
    throttled_before = throttled_ms(reader)
    read, empty, offset = 0, 0, 0
    started_at = time.monotonic()
    while time.monotonic() - started_at < 4:
        (answer,) = await fetch.client.fetch([FetchPartition(tip, offset, 64 * 1024)])
        assert answer.error is None
        if not answer.records:
            empty += 1
            continue
        read += len(answer.records)
        offset = (offset + 50) % RECORDS  # five batches further, round the segment
    rate = read / (time.monotonic() - started_at)
    assert 0.8 * BOUND <= rate <= 1.2 * BOUND, rate
    assert empty > 0  # held back at times, answered empty as Kafka does
    assert throttled_ms(reader) > throttled_before


async def test_a_bulk_read_is_paced_by_the_quota(quota_stack, telemetry):
    stack, tip = quota_stack
    fetch = await stack.start_fetch(**QUOTA)
    read = 0
    started_at = time.monotonic()
    while time.monotonic() - started_at < 4:
        async for chunk in fetch.client.read_offset_range(tip, 0, chunk_bytes=32 * 1024):
            read += len(chunk.records)
            if time.monotonic() - started_at >= 4:
                break
    rate = read / (time.monotonic() - started_at)
    assert 0.8 * BOUND <= rate <= 1.2 * BOUND, rate
