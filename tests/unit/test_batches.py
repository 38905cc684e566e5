"""BatchCutter cuts a broker-written segment into whole batches, however the bytes arrive."""

import struct
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.data import KAFKA_LOGS

from remotelog.core.errors import CorruptRecordError
from remotelog.kafka.batches import BatchCutter

SEGMENTS = sorted(KAFKA_LOGS.glob("*/*.log"))


def batches_of(log: bytes) -> list[tuple[int, int, int, int]]:
    """(position, size, base offset, last offset) of each batch, read straight from the headers."""
    found, position = [], 0
    while position < len(log):
        base, length = struct.unpack_from(">qi", log, position)
        (delta,) = struct.unpack_from(">i", log, position + 23)
        found.append((position, 12 + length, base, base + delta))
        position += 12 + length
    return found


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in pairwise(points)]


@pytest.fixture(scope="module", params=[p.name for p in SEGMENTS] or ["missing"])
def segment(request) -> bytes:
    matches = [p for p in SEGMENTS if p.name == request.param]
    if not matches:
        pytest.fail("tests/data/kafka-logs segments missing")
    data = matches[0].read_bytes()
    assert data, "an empty segment proves nothing"
    return data


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=12),
    start=st.integers(min_value=0),
    max_bytes=st.integers(min_value=1, max_value=40_000),
)
def test_any_chunking_yields_the_segments_batches_from_the_wanted_offset(
    segment: bytes, cuts: list[int], start: int, max_bytes: int
) -> None:
    batches = batches_of(segment)
    from_offset = batches[0][2] + start % (batches[-1][3] - batches[0][2] + 2)
    wanted = [b for b in batches if b[3] >= from_offset]
    cutter = BatchCutter(from_offset, "test")
    taken = []
    for piece in chunks(segment, cuts):
        cutter.feed(piece)
        while (got := cutter.take(max_bytes, at_least_one=True)) is not None:
            taken.append(got)
    assert cutter.buffered == 0
    expected = segment[wanted[0][0] :] if wanted else b""
    assert b"".join(t.data for t in taken) == expected
    starts = {b[0] - (wanted[0][0] if wanted else 0): b for b in wanted}
    ends = {b[0] + b[1] - wanted[0][0]: b[3] for b in wanted}
    position = 0
    for got in taken:
        first = starts[position]  # every piece starts at a batch boundary
        assert got.first_offset == first[2]
        assert len(got.data) <= max_bytes or len(got.data) == first[1]  # one oversize at most
        position += len(got.data)
        assert position in starts or position == len(expected)  # and ends at one
        assert got.last_offset == ends[position]


def test_until_offset_stops_after_the_batch_holding_the_offset_before_it(segment: bytes) -> None:
    batches = batches_of(segment)
    middle = batches[len(batches) // 2]
    cutter = BatchCutter(batches[0][2], "test", until_offset=middle[3] + 1)
    cutter.feed(segment)
    got = cutter.take(len(segment))
    assert got is not None
    assert got.data == segment[: middle[0] + middle[1]]
    assert got.last_offset == middle[3]
    assert cutter.reached_end


def test_a_whole_chunk_of_whole_batches_is_handed_out_without_a_copy(segment: bytes) -> None:
    cutter = BatchCutter(0, "test")
    cutter.feed(segment)
    got = cutter.take(len(segment))
    assert got is not None
    assert got.data is segment


def many_batches() -> bytes:
    """The shared segment with the most batches (most of them hold one)."""
    return max((p.read_bytes() for p in SEGMENTS), key=lambda log: len(batches_of(log)))


def test_batches_inside_one_chunk_are_a_view_of_it() -> None:
    # A Fetch reads its range in one piece: what it answers is a window on that read.
    segment = many_batches()
    batches = batches_of(segment)
    assert len(batches) >= 3
    second, last = batches[1], batches[-1]
    cutter = BatchCutter(second[2], "test")
    cutter.feed(segment)
    got = cutter.take(len(segment) - second[0] - last[1])  # all but the first and the last
    assert got is not None
    assert isinstance(got.data, memoryview)
    assert got.data.obj is segment
    assert got.data == segment[second[0] : last[0]]
    assert (got.first_offset, got.last_offset) == (second[2], batches[-2][3])


def test_batches_across_chunks_are_handed_out_as_views_of_the_fed_chunks() -> None:
    segment = many_batches()
    batches = batches_of(segment)
    assert len(batches) >= 3
    # Cut inside the first batch's header and in the middle of the second batch.
    cuts = [batches[0][0] + 30, batches[1][0] + batches[1][1] // 2]
    fed = chunks(segment, cuts)
    cutter = BatchCutter(0, "test")
    for chunk in fed:
        cutter.feed(chunk)
    got = cutter.take_pieces(len(segment))
    assert got is not None
    assert b"".join(got.pieces) == segment
    assert got.size == len(segment)
    assert (got.first_offset, got.last_offset) == (batches[0][2], batches[-1][3])
    # Nothing was copied: each piece is a fed chunk or a view of one.
    sources = [p.obj if isinstance(p, memoryview) else p for p in got.pieces]
    assert len(sources) == len(fed)
    assert all(source is chunk for source, chunk in zip(sources, fed, strict=True))
    assert cutter.buffered == 0


def test_corruption_names_the_position_in_the_stream(segment: bytes) -> None:
    first_size = batches_of(segment)[0][1]
    broken = bytearray(segment[:first_size] * 2)
    broken[first_size + 16] = 1  # the second batch's magic byte
    cutter = BatchCutter(0, "remote segment X")
    cutter.feed(bytes(broken[:first_size]))
    assert cutter.take(first_size) is not None
    cutter.feed(bytes(broken[first_size:]))
    with pytest.raises(CorruptRecordError, match=f"remote segment X: position {first_size}: "):
        cutter.take(len(broken))
