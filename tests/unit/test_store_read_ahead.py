"""The segment store's read-ahead (segmentstore/read_ahead.py) over an in-memory object:
which ranges it asks for, what the readers get, and its bounds."""

import asyncio
import os

import pytest

from remotelog.segmentstore.read_ahead import ReadAhead

CHUNK = 1000
DATA = os.urandom(CHUNK * 10 + 300)  # ten chunks and a short one


class Objects:
    """Ranged GETs of DATA under "k": each asked range is recorded; `failing` ranges
    fail once; `gate`, when set, holds every GET until it opens."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []
        self.failing: set[int] = set()
        self.gate: asyncio.Event | None = None
        self.cancelled = 0

    async def fetch(self, key: str, first: int, last: int) -> bytes:
        assert key == "k"
        self.asked.append((first, last))
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        await asyncio.sleep(0)
        if first in self.failing:
            self.failing.discard(first)
            raise ConnectionError(f"cut at {first}")
        return DATA[first : last + 1]


def read_ahead(objects: Objects, **bounds) -> tuple[ReadAhead, dict[str, int]]:
    counts = {"ahead": 0, "hits": 0}
    settings = {"chunk_bytes": CHUNK, "ahead": 3, "max_bytes": 64 * CHUNK, **bounds}
    reader = ReadAhead(
        objects.fetch,
        **settings,
        on_ahead=lambda: counts.__setitem__("ahead", counts["ahead"] + 1),
        on_hit=lambda: counts.__setitem__("hits", counts["hits"] + 1),
    )
    return reader, counts


async def take(reader: ReadAhead, start: int, last: int, at_most: int | None = None) -> bytes:
    """What a reader gets, closed after `at_most` bytes as Kafka closes a fetch's stream."""
    got = bytearray()
    pieces = reader.read("k", start, last, 256)
    async for piece in pieces:
        got += piece
        if at_most is not None and len(got) >= at_most:
            break
    await pieces.aclose()
    return bytes(got[:at_most] if at_most is not None else got)


async def test_fetches_like_kafkas_find_their_chunks_each_asked_for_once():
    objects = Objects()
    reader, counts = read_ahead(objects)
    last = len(DATA) - 1
    position = 0
    while position <= last:  # 700 bytes a fetch, each a new read to the object's end
        got = await take(reader, position, last, at_most=700)
        assert got == DATA[position : position + 700]
        position += len(got)
        await asyncio.sleep(0.01)  # the consumer's turn
    assert sorted(objects.asked) == [(i * CHUNK, i * CHUNK + CHUNK - 1) for i in range(11)]
    assert counts["ahead"] == 10  # every chunk after the first
    assert counts["hits"] >= 10
    await reader.close()


async def test_a_read_ends_where_asked_or_where_the_object_does():
    objects = Objects()
    reader, _ = read_ahead(objects, ahead=2)
    assert await take(reader, 1500, 4321) == DATA[1500:4322]
    # Nothing asked for past the read's end: chunks 1-4 only.
    await asyncio.sleep(0.01)
    assert sorted(objects.asked) == [(i * CHUNK, i * CHUNK + CHUNK - 1) for i in range(1, 5)]
    assert await take(reader, 10_100, 99_999) == DATA[10_100:]
    assert await take(reader, 20_000, 20_500) == b""
    await reader.close()


async def test_a_chunk_asked_for_ahead_that_failed_is_asked_again_by_its_reader():
    objects = Objects()
    objects.failing = {2 * CHUNK}
    reader, _ = read_ahead(objects)
    assert await take(reader, 0, len(DATA) - 1) == DATA
    assert objects.asked.count((2 * CHUNK, 3 * CHUNK - 1)) == 2
    await reader.close()


async def test_a_chunk_the_reader_itself_asked_for_fails_the_read():
    objects = Objects()
    objects.failing = {0}
    reader, _ = read_ahead(objects)
    with pytest.raises(ConnectionError, match="cut at 0"):
        await take(reader, 0, 500)
    assert await take(reader, 0, 500) == DATA[:501]  # the next read asks again
    await reader.close()


async def test_held_chunks_stay_within_max_bytes():
    objects = Objects()
    reader, _ = read_ahead(objects, ahead=8, max_bytes=4 * CHUNK)
    pieces = reader.read("k", 0, len(DATA) - 1, 256)
    got = bytearray()
    async for piece in pieces:
        got += piece
        assert reader.held() <= 4
    assert bytes(got) == DATA
    await reader.close()


async def test_a_reader_that_goes_away_leaves_the_get_to_the_next():
    objects = Objects()
    objects.gate = asyncio.Event()
    reader, counts = read_ahead(objects, ahead=0)
    first = asyncio.create_task(take(reader, 0, 99))
    await asyncio.sleep(0.01)
    first.cancel()  # Kafka gave up on this fetch while its GET was on its way
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(take(reader, 0, 99))
    await asyncio.sleep(0.01)
    objects.gate.set()
    assert await second == DATA[:100]
    assert objects.asked == [(0, CHUNK - 1)]  # one GET served both
    assert counts["hits"] == 1
    await reader.close()


async def test_untouched_chunks_are_let_go_and_their_gets_cancelled():
    now = [0.0]
    objects = Objects()
    reader = ReadAhead(
        objects.fetch,
        chunk_bytes=CHUNK,
        ahead=3,
        max_bytes=64 * CHUNK,
        idle_s=30,
        clock=lambda: now[0],
    )
    assert await take(reader, 0, len(DATA) - 1, at_most=10) == DATA[:10]
    objects.gate = asyncio.Event()  # chunks 1-3, asked for ahead, never come
    await asyncio.sleep(0.01)
    assert reader.held() == 4
    now[0] = 31.0  # the reader went away
    objects.gate = None
    assert await take(reader, 9 * CHUNK, 9 * CHUNK + 9) == DATA[9 * CHUNK : 9 * CHUNK + 10]
    assert reader.held() == 1  # chunk 9 alone
    await asyncio.sleep(0.01)
    assert objects.cancelled == 3
    await reader.close()
