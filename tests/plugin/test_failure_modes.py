"""The fast default paths when a part fails: a store that cannot read the broker's files
by path, and a Redis that hangs (SIGSTOPped: its connections open, nothing answered).

Copies by path the store refuses go by the stream instead, and leave Kafka no attempt in
COPY_SEGMENT_STARTED. Redis is asked only by recoveries: while it hangs, IsReady answers
within the plugin's deadline and Kafka goes on tiering."""

import asyncio
import signal
import uuid

import pytest
import pytest_asyncio
from support.servers import RedisServer
from support.waiting import eventually

from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState

from .conftest import BY_PATH, tiering_stack
from .test_kafka_tiers import (
    MORE_RECORDS,
    PARTITIONS,
    copied_past,
    create_tiered_topic,
    produce_plain,
)

# The plugin's IsReady deadline (client.lookup.timeout.ms, 1 s) twice over, and well short
# of a Redis call's 5 s timeout, which every IsReady waited out while Redis hung.
READY_DEADLINE_S = 2.0
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@pytest_asyncio.fixture(scope="module")
async def redis_server(tmp_path_factory):
    """A redis-server of this module's own, which its tests stop and continue."""
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield server
    server.process.send_signal(signal.SIGCONT)
    server.stop()


@pytest_asyncio.fixture(scope="module")
async def refused_paths(tmp_path_factory, s3_endpoint, redis_server):
    """A broker copying by path to a store allowed to read none of its files, and a
    metadata manager keeping its recovery leases in Redis."""
    tmp = tmp_path_factory.mktemp("refused")
    async with tiering_stack(
        tmp,
        s3_endpoint,
        store_settings={"copy.paths.allowed": str(tmp / "elsewhere")},
        metadata_settings={"redis.url": redis_server.url},
        **BY_PATH,
    ) as tiering:
        yield tiering


async def tiered_topic(tiering) -> tuple[str, uuid.UUID]:
    topic = f"failing-{uuid.uuid4().hex[:6]}"
    bootstrap = tiering.broker.bootstrap_servers
    return topic, await asyncio.to_thread(create_tiered_topic, bootstrap, topic)


async def states_of(stack, topic_id, topic: str) -> list[RemoteLogSegmentState]:
    return [
        segment.state
        for partition in range(PARTITIONS)
        for segment in await stack.segments(TopicIdPartition(topic_id, topic, partition))
    ]


async def test_copies_the_store_cannot_read_by_path_go_by_stream_and_leak_no_attempt(
    refused_paths,
):
    broker, stack = refused_paths.broker, refused_paths.stack
    topic, topic_id = await tiered_topic(refused_paths)
    await asyncio.to_thread(produce_plain, broker.bootstrap_servers, topic, MORE_RECORDS)
    await copied_past(broker, topic, 0)

    async def settled() -> list[RemoteLogSegmentState] | None:
        # A copy under way is STARTED for a moment; a leaked attempt stays so for good.
        states = await states_of(stack, topic_id, topic)
        return states if states and set(states) == {FINISHED} else None

    await eventually(settled, timeout_s=60)
    log = broker.run_log()
    refused = "not in a partition directory of copy.paths.allowed): this copy takes"
    assert any(refused in line for line in log)
    copies = [line for line in log if "Copied segment" in line and f":{topic}-" in line]
    assert copies
    assert all("to the segment store by stream in" in line for line in copies)


async def test_tiering_goes_on_while_redis_hangs(refused_paths, redis_server):
    broker, stack = refused_paths.broker, refused_paths.stack
    topic, topic_id = await tiered_topic(refused_paths)
    tip = TopicIdPartition(topic_id, topic, 0)
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        produced = await asyncio.to_thread(
            produce_plain, broker.bootstrap_servers, topic, MORE_RECORDS
        )
        await copied_past(broker, topic, 0)
        for _ in range(10):
            assert await stack.metadata.client.is_ready(tip, timeout_s=READY_DEADLINE_S)
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    states = await states_of(stack, topic_id, topic)
    assert RemoteLogSegmentState.COPY_SEGMENT_FINISHED in states
    assert len(produced[0]) == MORE_RECORDS
