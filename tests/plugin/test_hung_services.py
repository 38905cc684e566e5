"""Services that hang rather than die: SIGSTOPped, they keep their connections open and
answer nothing. A broker with the plugin goes on serving its clients meanwhile (no broker
thread waits on remotelog), a copy the hung store holds fails for good at the plugin's
copy deadline, and after SIGCONT tiering resumes with nothing lost and nothing copied
twice.

While the metadata manager is stopped, each client call must take less than half the
plugin's call deadline: a broker thread that waited on the stopped manager would take
the whole of it."""

import asyncio
import signal
import time
import uuid

import pytest_asyncio
from support.topics import read_to_end
from support.waiting import eventually

from .conftest import tiering_stack
from .test_kafka_tiers import (
    KILLED_RECORDS,
    KILLED_SEGMENT_BYTES,
    MORE_RECORDS,
    PARTITIONS,
    TIERING_TIMEOUT_S,
    copied_past,
    copies_resume,
    create_tiered_topic,
    live_segments,
    produce_plain,
    uploads_of,
)

COPY_TIMEOUT_MS = 3000
# The plugin's client.timeout.ms: the deadline a call blocked on the manager waits out.
CALL_DEADLINE_S = 30
# Records a partition that roll a segment or more (1 KiB each, 1 MiB segments).
ROLLING = MORE_RECORDS


@pytest_asyncio.fixture(scope="module")
async def hung(tmp_path_factory, s3_endpoint):
    """A broker whose plugin gives a copy COPY_TIMEOUT_MS, reading through the streams."""
    properties = {
        "rsm.config.client.copy.timeout.ms": str(COPY_TIMEOUT_MS),
        "rlmm.config.client.timeout.ms": str(CALL_DEADLINE_S * 1000),
    }
    async with tiering_stack(tmp_path_factory.mktemp("hung"), s3_endpoint, **properties) as tiering:
        yield tiering


async def timed(latencies: dict, what: str, call, *args):
    """`call(*args)` in a thread, its wall time kept under `what`."""
    started = time.monotonic()
    result = await asyncio.to_thread(call, *args)
    latencies[what] = time.monotonic() - started
    return result


async def check_whole_and_once(tiering, topic: str, topic_id, values: dict) -> None:
    """Every partition read from offset 0 through Kafka is `values`, each segment is tiered
    once, and the store holds nothing the metadata does not name."""
    bootstrap = tiering.broker.bootstrap_servers
    for partition in range(PARTITIONS):
        messages = await asyncio.to_thread(read_to_end, bootstrap, topic, partition)
        assert [m.value() for m in messages] == values[partition]
    live = await live_segments(tiering.stack, topic_id, topic)
    for partition in range(PARTITIONS):
        starts = [s.start_offset for s in live[partition]]
        assert starts[0] == 0
        assert starts == sorted(set(starts))  # one copy of each segment
    report = await tiering.stack.scrub()
    assert (report.orphans, report.uploads) == ([], [])


def appended(*produced: dict) -> dict:
    return {p: [v for values in produced for v in values[p]] for p in range(PARTITIONS)}


async def test_a_hung_metadata_manager_holds_no_broker_thread(hung):
    broker, stack = hung.broker, hung.stack
    bootstrap = broker.bootstrap_servers
    tiering = f"tiering-{uuid.uuid4().hex[:6]}"
    tiering_id = await asyncio.to_thread(create_tiered_topic, bootstrap, tiering)
    early = await asyncio.to_thread(produce_plain, bootstrap, tiering, ROLLING)
    await copied_past(broker, tiering, 0)
    manager = await stack.serve_apart("metadata-manager")
    latencies: dict[str, float] = {}
    try:
        ahead = await timed(
            latencies, "produce before the stop", produce_plain, bootstrap, tiering, 300
        )
        manager.send_signal(signal.SIGSTOP)
        # A new tiered topic: its partitions' leadership goes to the plugin, which cannot
        # tell the stopped manager; the partitions must lead all the same.
        created = f"created-{uuid.uuid4().hex[:6]}"
        created_id = await timed(
            latencies, "create a tiered topic", create_tiered_topic, bootstrap, created
        )
        during = await timed(latencies, "produce to it", produce_plain, bootstrap, created, 300)
        more = await timed(
            latencies, "produce to a tiered one", produce_plain, bootstrap, tiering, 300
        )
        for partition in range(PARTITIONS):
            messages = await timed(
                latencies, f"read {partition} back", read_to_end, bootstrap, created, partition
            )
            assert [m.value() for m in messages] == during[partition]
        await asyncio.sleep(2)  # the plugin's notification and copies wait meanwhile
    finally:
        manager.send_signal(signal.SIGCONT)
    slow = {what: s for what, s in latencies.items() if s >= CALL_DEADLINE_S / 2}
    assert not slow, f"with the metadata manager SIGSTOPped, these waited on it: {slow}"
    try:
        # Tiering resumes: both topics roll segments that Kafka copies and frees locally.
        latest = await asyncio.to_thread(produce_plain, bootstrap, created, ROLLING)
        last = await asyncio.to_thread(produce_plain, bootstrap, tiering, ROLLING)
        await copied_past(broker, created, 0)
        await copied_past(broker, tiering, ROLLING + 600)
    finally:
        manager.kill()
        manager.wait()
        await stack.start_metadata()
    await check_whole_and_once(hung, created, created_id, appended(during, latest))
    await check_whole_and_once(hung, tiering, tiering_id, appended(early, ahead, more, last))


async def test_a_store_hung_past_the_copy_deadline_loses_nothing(hung):
    broker, stack = hung.broker, hung.stack
    bootstrap = broker.bootstrap_servers
    topic = f"hung-{uuid.uuid4().hex[:6]}"
    big = {"segment.bytes": str(KILLED_SEGMENT_BYTES)}
    topic_id = await asyncio.to_thread(create_tiered_topic, bootstrap, topic, **big)
    upload_under_way = uploads_of(stack, topic)
    store = await stack.serve_apart("segment-store")
    gave_up = "failed (DEADLINE_EXCEEDED); Kafka deletes the attempt and copies again"
    try:
        producing = asyncio.create_task(
            asyncio.to_thread(produce_plain, bootstrap, topic, KILLED_RECORDS)
        )
        await eventually(upload_under_way, timeout_s=TIERING_TIMEOUT_S, interval_s=0.01)
        store.send_signal(signal.SIGSTOP)
        values = await producing
        # The copy the store holds reaches its deadline: the plugin fails it for good.
        await eventually(
            lambda: any(gave_up in line for line in broker.run_log()), timeout_s=60, interval_s=0.2
        )
        store.send_signal(signal.SIGCONT)
        more = await copies_resume(broker, topic, upload_under_way)
    finally:
        store.send_signal(signal.SIGCONT)
        store.kill()
        store.wait()
        await stack.start_store()
    await check_whole_and_once(hung, topic, topic_id, appended(values, more))
