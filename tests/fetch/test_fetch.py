"""Fetch, ReadOffsetRange and ListOffsets over tiered broker-written logs, on both backends."""

import itertools

import grpc
import pytest
from support.services import new_partition
from support.telemetry import counter

from remotelog.client import FetchPartition
from remotelog.core import metrics as m
from remotelog.core.errors import (
    InvalidArgumentError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from remotelog.fetch.reader import INDEX_SLACK_BYTES
from remotelog.kafka.records import decode_records, iter_batches

MIB = 1024 * 1024
STORE_SCOPE = "remotelog.segmentstore"


def headers(data: bytes):
    return list(iter_batches(data))


def records(data: bytes):
    return [r for h in iter_batches(data) for r in decode_records(data, h)]


async def fetch_one(stack, name, offset, max_bytes=MIB, *, via=0, **kwargs):
    (result,) = await stack.running[via].client.fetch(
        [FetchPartition(stack.tip(name), offset, max_bytes)], **kwargs
    )
    return result


@pytest.mark.parametrize("via", [0, 1, 2])
@pytest.mark.parametrize("name", ["timeindex", "timeindex_wide", "topic_a"])
async def test_every_record_reads_back_byte_identical(tiered, name, via, telemetry):
    """via 0: through the segment store service; via 1: reading the backend directly;
    via 2: the bytes skip the store: its short circuit (descriptors, filesystem) or the
    URLs it signs (S3). timeindex_wide: timeindex with KIP-1333's 12-byte index entries."""
    reader, _ = telemetry
    topic = tiered.tip(name).topic
    store_bytes_before = counter(reader, m.STORE_FETCH_BYTES.name, topic, STORE_SCOPE)
    expected = tiered.log_bytes(name)
    received, offset, fetches = [], 0, 0
    last_offset = headers(expected)[-1].last_offset
    while offset <= last_offset:
        result = await fetch_one(tiered, name, offset, max_bytes=300_000, via=via)
        assert result.error is None
        assert result.log_start_offset == 0
        batches = headers(result.records)
        assert batches, f"nothing at offset {offset}"
        assert batches[0].base_offset == offset  # whole batches, contiguous
        received.append(result.records)
        offset = batches[-1].last_offset + 1
        fetches += 1
    assert b"".join(received) == expected
    assert fetches >= len(tiered.partitions[name][1])  # a fetch never crosses a segment
    if via == 2 and tiered.backend == "s3":
        # Read from S3 by URL: what the store served was indexes, not the log.
        through_store = counter(reader, m.STORE_FETCH_BYTES.name, topic, STORE_SCOPE)
        assert through_store - store_bytes_before < len(expected) // 2


async def test_offsets_of_every_kind(tiered):
    log = tiered.log_bytes("topic_a")
    multi = next(h for h in headers(log) if h.records_count > 1)
    inside = multi.base_offset + multi.records_count // 2
    result = await fetch_one(tiered, "topic_a", inside, max_bytes=1)
    (first,) = headers(result.records)  # min_one_message: exactly the batch holding it
    assert first.base_offset == multi.base_offset
    assert first.base_offset <= inside <= first.last_offset

    last = headers(log)[-1]
    result = await fetch_one(tiered, "topic_a", last.last_offset)
    assert [h.base_offset for h in headers(result.records)] == [last.base_offset]

    result = await fetch_one(tiered, "timeindex", 0, max_bytes=1)
    assert [r.offset for r in records(result.records)] == [0]
    assert records(result.records)[0].value == b"kafkaVal-0"

    beyond = await fetch_one(tiered, "topic_a", last.last_offset + 1)
    assert isinstance(beyond.error, OffsetOutOfRangeError)
    assert "does not exist in remote tier" in beyond.error.message
    assert beyond.records == b""


async def test_a_partition_without_remote_data_is_unknown_topic_or_partition(tiered):
    """Retriable, as Kafka's: retention may have emptied the tier until the next copy."""
    ghost = new_partition("ghost")
    (result,) = await tiered.running[0].client.fetch([FetchPartition(ghost, 0, 1024)])
    assert isinstance(result.error, UnknownTopicOrPartitionError)
    assert result.error.retriable
    assert result.error.message == f"{ghost} has no data in the remote tier"
    assert result.records == b""


async def test_a_leader_epoch_newer_than_any_tiered_is_unknown_leader_epoch(tiered):
    tip = tiered.tip("topic_a")
    client = tiered.running[0].client
    (known,) = await client.fetch([FetchPartition(tip, 0, 1024, leader_epoch=0)])
    assert known.error is None
    assert headers(known.records)[0].base_offset == 0
    (newer,) = await client.fetch([FetchPartition(tip, 0, 1024, leader_epoch=3)])
    assert isinstance(newer.error, UnknownLeaderEpochError)
    assert newer.error.retriable
    assert "leader epoch 3" in newer.error.message
    assert "latest epoch in the remote tier (0)" in newer.error.message
    assert newer.records == b""


async def test_max_bytes_without_min_one_message_returns_nothing_rather_than_a_partial_batch(
    tiered,
):
    result = await fetch_one(tiered, "topic_a", 0, max_bytes=100, min_one_message=False)
    assert result.error is None
    assert result.records == b""


async def test_multi_partition_fetch_answers_each_partition_in_order(tiered):
    client = tiered.running[0].client
    names = ["timeindex", "topic_a", "txns", "gapped"]
    asked = [FetchPartition(tiered.tip(n), 0, 64 * 1024) for n in names]
    # A partition with nothing tiered answers on its own, without failing the rest.
    beyond = FetchPartition(new_partition("ghost"), 0, 1024)
    results = await client.fetch([*asked, beyond], max_bytes=10 * MIB)
    assert [r.topic_id_partition for r in results] == [
        p.topic_id_partition for p in [*asked, beyond]
    ]
    for name, result in zip(names, results, strict=False):
        assert result.error is None
        assert result.records
        assert tiered.log_bytes(name).startswith(result.records)
    assert isinstance(results[4].error, UnknownTopicOrPartitionError)

    # The total limit: the first partition keeps its batches, the others get
    # whole batches within what is left, in request order.
    limited = await client.fetch(asked, max_bytes=70 * 1024)
    assert limited[0].records == results[0].records
    assert sum(len(r.records) for r in limited) <= 70 * 1024
    for full, cut in zip(results, limited, strict=False):
        assert cut.error is None
        assert full.records.startswith(cut.records)
        if cut.records:
            headers(cut.records)  # parses: whole batches only


async def test_a_segment_without_the_offset_continues_into_the_next(tiered):
    result = await fetch_one(tiered, "gapped", 12)
    assert result.error is None
    assert [h.base_offset for h in headers(result.records)] == [20, 25]


class RecordingReader:
    """The fetch service's segment reader, noting each byte range it is asked for."""

    def __init__(self, inner):
        self.inner = inner
        self.ranges = []

    def fetch_log_segment_views(self, metadata, start, end=None, *, timeout_s=None):
        self.ranges.append((start, end))
        return self.inner.fetch_log_segment_views(metadata, start, end, timeout_s=timeout_s)

    async def open_log_segment(self, metadata, start, *, timeout_s=None):
        return await self.inner.open_log_segment(metadata, start, timeout_s=timeout_s)


@pytest.mark.parametrize("via", [0, 1, 2])
async def test_a_fetch_beyond_its_first_range_reads_ranges_twice_as_long_each(tiered, via):
    """Not the rest of the segment in one read: an 8 MiB mapping per Fetch, when it was."""
    reader = tiered.running[via].app.reader
    recording = RecordingReader(reader.store)
    reader.store = recording
    try:
        result = await fetch_one(tiered, "big_batches", 3, max_bytes=1, via=via)  # min_one_message
    finally:
        reader.store = recording.inner
    expected_batches = tiered.log_bytes("big_batches")
    assert headers(result.records)[0].base_offset == 3
    assert result.records == expected_batches[-len(result.records) :]
    # The read starts where the index points (no index here: the segment's start).
    size = len(expected_batches)
    expected, position, length = [], 0, 1 + INDEX_SLACK_BYTES
    while position < size:
        bound = min(position + length, size)
        expected.append((position, bound - 1 if bound < size else None))
        position, length = bound, length * 2
    assert recording.ranges == expected
    assert len(expected) == 5  # 64 KiB, 128 KiB, 256 KiB, 512 KiB, and on to the end


async def test_read_committed_lists_aborted_transactions_from_later_txn_indexes(tiered):
    first = await fetch_one(tiered, "txns", 0, read_committed=True)
    assert headers(first.records)[-1].last_offset == 7  # segment 0 only
    # Producer 7's abort marker is in segment 1: its txn index tells.
    assert first.aborted_transactions == [(7, 3)]
    direct = await fetch_one(tiered, "txns", 0, read_committed=True, via=1)
    assert direct.aborted_transactions == [(7, 3)]

    second = await fetch_one(tiered, "txns", 8, read_committed=True)
    assert sorted(second.aborted_transactions) == [(7, 3), (9, 13)]

    uncommitted = await fetch_one(tiered, "txns", 8)
    assert uncommitted.aborted_transactions == []
    assert uncommitted.records == second.records


class LendingSpy:
    """The fetch service's segment reader, noting whether each open lent a descriptor."""

    def __init__(self, inner):
        self.inner = inner
        self.lent = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def open_log_segment(self, metadata, start, *, timeout_s=None):
        opened = await self.inner.open_log_segment(metadata, start, timeout_s=timeout_s)
        self.lent.append(opened is not None)
        return opened


@pytest.fixture
def lending(tiered, request):
    """(the client of fetch service `via`, its spy); the file path is taken where the
    store lends its files: the filesystem backend read directly, or its short circuit."""
    via = request.node.callspec.params["via"]
    reader = tiered.running[via].app.reader
    spy = reader.store = LendingSpy(reader.store)
    yield tiered.running[via].client, spy
    reader.store = spy.inner
    assert spy.lent
    assert set(spy.lent) == {tiered.backend == "filesystem" and via != 0}


@pytest.mark.parametrize("via", [0, 1, 2])
async def test_bulk_read_streams_whole_batches_of_the_range(tiered, lending, via):
    client, _ = lending
    tip = tiered.tip("timeindex")
    expected = tiered.log_bytes("timeindex")
    chunks = [c async for c in client.read_offset_range(tip, 0, chunk_bytes=256 * 1024)]
    assert b"".join(c.records for c in chunks) == expected
    assert len(chunks) > 4
    for chunk in chunks:
        assert isinstance(chunk.records, memoryview)  # a window on its message, not a copy
        assert len(chunk.records) <= 256 * 1024
        assert headers(chunk.records)[0].base_offset == chunk.first_offset
        assert headers(chunk.records)[-1].last_offset == chunk.last_offset
    assert all(a.last_offset + 1 == b.first_offset for a, b in itertools.pairwise(chunks))

    part = [c async for c in client.read_offset_range(tip, 1_000, 20_000)]
    data = b"".join(c.records for c in part)
    assert [r.offset for r in records(data)] == list(range(1_000, 20_000))


@pytest.mark.parametrize("via", [0, 1, 2])
async def test_bulk_reads_cross_gaps_and_carry_batches_bigger_than_a_chunk(tiered, lending, via):
    client, _ = lending
    for name in ("gapped", "big_batches", "txns"):
        tip = tiered.tip(name)
        chunks = [c async for c in client.read_offset_range(tip, 0, chunk_bytes=1_000)]
        assert b"".join(c.records for c in chunks) == tiered.log_bytes(name)
        # Within the chunk size, or one batch bigger than it.
        assert all(len(c.records) <= 1_000 or len(headers(c.records)) == 1 for c in chunks)
    # 12 is in the gap: the read goes on in the next segment, and stops at the end offset.
    chunks = [c async for c in client.read_offset_range(tiered.tip("gapped"), 12, 26)]
    assert [h.base_offset for c in chunks for h in headers(c.records)] == [20, 25]
    # From inside a batch: the batch that holds the offset comes whole.
    chunks = [c async for c in client.read_offset_range(tiered.tip("gapped"), 7, 8)]
    assert [(c.first_offset, c.last_offset) for c in chunks] == [(5, 9)]


async def test_list_offsets_over_the_remote_tier(tiered):
    client = tiered.running[0].client
    tip = tiered.tip("timeindex")
    everything = records(tiered.log_bytes("timeindex"))
    earliest = await client.list_offsets(tip, -2)
    assert earliest.offset == 0
    latest = await client.list_offsets(tip, -5)
    assert latest.offset == everything[-1].offset

    target = everything[20_000].timestamp
    expected = next(r for r in everything if r.timestamp >= target)
    found = await client.list_offsets(tip, target)
    assert (found.offset, found.timestamp) == (expected.offset, expected.timestamp)
    assert found.leader_epoch == 0
    assert await client.list_offsets(tip, everything[-1].timestamp + 1) is None


async def test_bad_requests_name_the_field(tiered):
    client = tiered.running[0].client
    tip = tiered.tip("topic_a")
    with pytest.raises(InvalidArgumentError) as info:
        await client.fetch([FetchPartition(tip, -1)])
    assert info.value.field == "partitions[0].fetch_offset"
    with pytest.raises(InvalidArgumentError) as info:
        await client.fetch([FetchPartition(tip, 0), FetchPartition(tip, 5)])
    assert info.value.field == "partitions[1].topic_id_partition"
    with pytest.raises(InvalidArgumentError) as info:
        await client.fetch([FetchPartition(tip, 0, 0)])
    assert info.value.field == "partitions[0].partition_max_bytes"
    with pytest.raises(InvalidArgumentError) as info:
        await client.list_offsets(tip, -7)
    assert info.value.field == "timestamp"
    with pytest.raises(InvalidArgumentError) as info:
        _ = [c async for c in client.read_offset_range(tip, 10, 10)]
    assert info.value.field == "end_offset"
    with pytest.raises(InvalidArgumentError) as info:
        _ = [c async for c in client.read_offset_range(tip, 0, chunk_bytes=1 << 30)]
    assert info.value.field == "chunk_bytes"
    assert info.value.grpc_code == grpc.StatusCode.INVALID_ARGUMENT
