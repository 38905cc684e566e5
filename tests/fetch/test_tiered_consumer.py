"""TieredConsumer over the remote tier: the records a direct decode of the segments gives."""

import asyncio
import functools
import gc
import logging
import uuid

import pytest
from support.topics import OpenTransaction, as_record, broker_records, produce

from remotelog.client import AtTimestamp, BlockingTieredConsumer, TieredConsumer
from remotelog.core.errors import (
    InvalidArgumentError,
    OffsetOutOfRangeError,
    RemoteResourceNotFoundError,
)
from remotelog.dev.broker import free_port
from remotelog.kafka.consumer_records import fetched_records
from remotelog.kafka.records import build_batch

from .conftest import batch

# The transactional log (conftest.transactional_log): producer 7 aborts 3-4 and 8-9,
# producer 8 commits 5-6 (marker at 7), producer 9 aborts 13-14; markers at 7, 10, 15.
UNCOMMITTED = [0, 1, 2, 3, 4, 5, 6, 8, 9, 11, 12, 13, 14, 16]
COMMITTED = [0, 1, 2, 5, 6, 11, 12, 16]


def addresses(stack) -> tuple[str, str]:
    return (
        f"127.0.0.1:{stack.running[0].service.port}",
        f"127.0.0.1:{stack.metadata.service.port}",
    )


def direct(stack, name: str, start: int = 0, end: int | None = None) -> list:
    """The records as decoded straight from the tiered segment files."""
    tip = stack.tip(name)
    log = stack.log_bytes(name)
    return list(fetched_records(log, tip.topic, 0, start_offset=start, end_offset=end).records())


async def read_all(consumer, tip, start="earliest", end=None) -> list:
    return [record async for record in consumer.read(tip, start, end)]


@pytest.mark.parametrize("name", ["timeindex", "topic_a", "gapped", "big_batches"])
async def test_a_whole_partition_equals_a_direct_decode_of_its_segments(tiered, name):
    async with TieredConsumer.connect(*addresses(tiered)) as consumer:
        records = await read_all(consumer, tiered.tip(name))
    assert records == direct(tiered, name)
    assert len(records) > 0
    assert [r.offset for r in records] == sorted({r.offset for r in records})


async def test_offset_and_timestamp_bounds_cut_where_asked(tiered):
    tip = tiered.tip("topic_a")
    everything = direct(tiered, "topic_a")
    middle = everything[len(everything) // 2]
    async with TieredConsumer.connect(*addresses(tiered)) as consumer:
        assert await read_all(consumer, tip, middle.offset, middle.offset + 7) == direct(
            tiered, "topic_a", middle.offset, middle.offset + 7
        )
        by_time = await read_all(consumer, tip, AtTimestamp(middle.timestamp))
        assert by_time[0].offset == min(
            r.offset for r in everything if r.timestamp >= middle.timestamp
        )
        assert by_time[-1] == everything[-1]
        assert await read_all(consumer, tip, "latest") == []
        # Each backend's stack tiered its own topic_a (another topic id) on one broker.
        (summary,) = [
            p for p in await consumer.partitions("topic_a") if p.topic_id_partition == tip
        ]
        assert summary.earliest_offset == everything[0].offset
        assert summary.latest_tiered_offset == everything[-1].offset


async def test_read_committed_hides_aborted_records_and_markers_are_never_records(tiered):
    tip = tiered.tip("txns")
    async with TieredConsumer.connect(*addresses(tiered)) as consumer:
        assert [r.offset for r in await read_all(consumer, tip)] == UNCOMMITTED
    committed = TieredConsumer.connect(*addresses(tiered), isolation_level="read_committed")
    async with committed:
        records = await read_all(committed, tip)
    assert [r.offset for r in records] == COMMITTED
    assert {r.value for r in records} == {b"plain", b"txn-8"}


async def test_an_offset_below_the_remote_tier_and_bad_starts_are_refused(tiered):
    # Retention deleted offsets 0-49: the remote tier starts at 50.
    tip = await tiered.tier_batches("retained", [[batch(50, 5), batch(55, 5)]])
    async with TieredConsumer.connect(*addresses(tiered)) as consumer:
        assert [r.offset for r in await read_all(consumer, tip)] == list(range(50, 60))
        with pytest.raises(
            OffsetOutOfRangeError, match=r"offset 10 is below .* earliest offset 50"
        ):
            await read_all(consumer, tip, 10)
        with pytest.raises(InvalidArgumentError, match="negative"):
            await read_all(consumer, tip, -1)
        with pytest.raises(InvalidArgumentError, match="an offset, earliest, latest"):
            await read_all(consumer, tip, "newest")
    with pytest.raises(InvalidArgumentError, match="isolation_level"):
        TieredConsumer(None, None, isolation_level="committed")


async def test_the_blocking_consumer_reads_the_same(tiered):
    def read_blocking():
        # Its own loop in this thread, while the services run in the test's.
        with BlockingTieredConsumer(*addresses(tiered)) as consumer:
            records = list(consumer.read(tiered.tip("timeindex")))
            partial = consumer.read(tiered.tip("topic_a"))
            first = next(partial)
            partial.close()  # abandoned midway: its stream is closed, the loop goes on
            listed = consumer.partitions("timeindex")
        return records, first, listed

    records, first, listed = await asyncio.to_thread(read_blocking)
    assert records == direct(tiered, "timeindex")
    assert first == direct(tiered, "topic_a")[0]
    assert tiered.tip("timeindex") in [p.topic_id_partition for p in listed]


async def test_a_blocking_consumer_abandoned_midway_closes_leaving_nothing_pending(tiered, caplog):
    # What a Spark task does under limit() or show(): it stops taking chunks, closes
    # its consumer, and the worker runs its next task on a new one. Eight rounds: a
    # close that cancelled gRPC's tasks at once met its poller in a later round.
    def abandon_repeatedly() -> list:
        firsts = []
        for _ in range(8):
            with BlockingTieredConsumer(*addresses(tiered), chunk_bytes=4096) as consumer:
                partial = consumer.read_undecoded(tiered.tip("big_batches"))
                firsts.append(next(partial).records()[0])
                partial.close()
        gc.collect()  # a task dropped pending says so when it is collected
        return firsts

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        firsts = await asyncio.to_thread(abandon_repeatedly)
    assert firsts == [direct(tiered, "big_batches")[0]] * 8
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


@pytest.mark.parametrize("name", ["timeindex", "topic_a", "gapped", "big_batches"])
async def test_on_the_stores_host_whole_segments_come_from_its_files(tiered, name):
    fetch, metadata = addresses(tiered)
    if tiered.backend == "filesystem":
        # Nothing listens there: every record must come from the stored files.
        fetch = f"127.0.0.1:{free_port()}"
    # An S3 store keeps no files to lend: the fetch service reads, as without the socket.
    async with TieredConsumer.connect(
        fetch, metadata, short_circuit_socket=tiered.short_circuit_socket, chunk_bytes=4096
    ) as consumer:
        records = await read_all(consumer, tiered.tip(name))
    assert records == direct(tiered, name)
    assert len(records) > 0


async def test_what_the_files_cannot_give_the_fetch_service_reads(tiered, tmp_path):
    tip = tiered.tip("topic_a")
    everything = direct(tiered, "topic_a")
    middle = everything[len(everything) // 2].offset  # inside a segment: found by its index
    async with TieredConsumer.connect(
        *addresses(tiered), short_circuit_socket=tiered.short_circuit_socket
    ) as consumer:
        assert await read_all(consumer, tip, middle) == direct(tiered, "topic_a", middle)
    # A task on another host: no store socket there.
    async with TieredConsumer.connect(
        *addresses(tiered), short_circuit_socket=str(tmp_path / "store.sock")
    ) as consumer:
        assert await read_all(consumer, tip) == everything


async def test_a_segment_deleted_after_its_listing_reads_as_through_the_fetch_service(tiered):
    name = f"deleted-{uuid.uuid4().hex[:6]}"
    tip = await tiered.tier_batches(name, [[batch(0, 5)], [batch(5, 5)]])
    first, _ = tiered.partitions[name][1]
    await tiered.store.client.delete_log_segment_data(first.metadata)  # the metadata stays

    async def outcome(**options) -> object:
        async with TieredConsumer.connect(*addresses(tiered), **options) as consumer:
            try:
                return [r.offset for r in await read_all(consumer, tip)]
            except Exception as exc:  # the outcome compared is the error itself
                return (type(exc), getattr(exc, "reason", None))

    through_service = await outcome()
    assert through_service == (RemoteResourceNotFoundError, "SEGMENT_NOT_FOUND")
    assert await outcome(short_circuit_socket=tiered.short_circuit_socket) == through_service


def fields(records) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records]


async def test_history_from_the_remote_tier_and_the_tail_from_the_broker_meet_exactly(
    tiered, broker
):
    """Records 0-59 on the broker, 0-39 tiered (as the copy scheduler would have)."""
    topic = f"hybrid-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(produce, broker.bootstrap_servers, topic, 60)

    # Two segments of batches of four records, as the broker would have written them.
    segments = [
        [build_batch([as_record(o) for o in range(b, b + 4)]) for b in range(first, first + 20, 4)]
        for first in (0, 20)
    ]
    tip = await tiered.tier_batches(topic, segments)
    on_broker = await asyncio.to_thread(broker_records, broker.bootstrap_servers, topic)
    assert [r[0] for r in on_broker] == list(range(60))

    consumer = TieredConsumer.connect(
        *addresses(tiered), bootstrap_servers=broker.bootstrap_servers
    )
    untiered = f"{topic}-fresh"  # on the broker only: nothing tiered yet
    await asyncio.to_thread(produce, broker.bootstrap_servers, untiered, 5)
    async with consumer:
        assert fields(await read_all(consumer, tip)) == on_broker
        assert fields(await read_all(consumer, tip, 35, 45)) == on_broker[35:45]
        assert fields(await read_all(consumer, tip, 45)) == on_broker[45:]
        listed = {
            s.topic_id_partition.topic: (s.earliest_offset, s.latest_tiered_offset)
            for s in await consumer.partitions()
        }
        assert listed[topic] == (0, 39)
        assert listed[untiered] == (0, -1)
        assert not any(name.startswith("__") for name in listed)
        (fresh,) = await consumer.partitions(untiered)
        fresh_records = await asyncio.to_thread(broker_records, broker.bootstrap_servers, untiered)
        assert fields(await read_all(consumer, fresh.topic_id_partition)) == fresh_records
        assert await consumer.partitions("never-produced") == []
    # Without a broker the read ends at the last tiered offset.
    async with TieredConsumer.connect(*addresses(tiered)) as remote_only:
        assert fields(await read_all(remote_only, tip)) == on_broker[:40]


async def test_read_committed_ends_at_the_brokers_last_stable_offset(tiered, broker):
    """0-4 tiered, 0-16 on the broker with a transaction still open over 14-16."""
    topic = f"open-txn-{uuid.uuid4().hex[:6]}"
    await asyncio.to_thread(produce, broker.bootstrap_servers, topic, 10)
    transaction = await asyncio.to_thread(OpenTransaction, broker.bootstrap_servers, topic)
    tip = await tiered.tier_batches(topic, [[build_batch([as_record(o) for o in range(5)])]])
    connect = functools.partial(
        TieredConsumer.connect, *addresses(tiered), bootstrap_servers=broker.bootstrap_servers
    )
    try:
        async with connect(isolation_level="read_committed") as committed:
            assert await committed.end_offset(tip) == OpenTransaction.LAST_STABLE
            assert [r.offset for r in await read_all(committed, tip)] == OpenTransaction.COMMITTED
            assert await read_all(committed, tip, "latest") == []
        async with connect() as uncommitted:
            # ListOffsets(latest) is the log end: batches of several records each.
            assert await uncommitted.end_offset(tip) == OpenTransaction.HIGH_WATERMARK
            found = [r.offset for r in await read_all(uncommitted, tip)]
            assert found == [o for o in range(17) if o != 13]  # 13: the commit marker
    finally:
        await asyncio.to_thread(transaction.abort)
    async with connect(isolation_level="read_committed") as committed:
        # The abort's marker (17) makes the log stable again; 14-16 stay hidden.
        assert await committed.end_offset(tip) == OpenTransaction.HIGH_WATERMARK + 1
        assert [r.offset for r in await read_all(committed, tip)] == OpenTransaction.COMMITTED
