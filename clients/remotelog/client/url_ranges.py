"""Reading an offset range straight from object storage, by the URLs the fetch service locates.

LocateOffsetRange names each segment of the range with a presigned URL of its log
and the bytes to read of it. This reader GETs those bytes itself, in ranges of
`range_bytes`, with up to `parallel` GETs in flight ahead of the bytes being cut
into batches: across segment boundaries too, and the next segments are located
when the GETs reach them. It holds at most `parallel` ranges at once, and a
reader that stops or is closed cancels the GETs on their way.

A GET that fails (503 SlowDown, a connection cut midway) or outlasts its timeout is
asked again from the byte it reached, with backoff, up to MAX_GET_ATTEMPTS times. A
GET whose first byte is later than `hedge_percentile` of the reader's recent GETs'
is hedged: the same range is asked a second time, the first to answer is read, the
other cancelled (object storage's slowest requests are slow on one server, and a
second request is served by another).
What cannot go on by URL (a refused URL, the store out of reach, no URLs at all)
raises UrlReadUnavailable,
and the caller reads the rest through ReadOffsetRange from the batch after the
last one handed out.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from remotelog.client.log_readers import LogChunks
from remotelog.client.remote_fetch import RemoteFetchClient
from remotelog.client.url_reader import UrlReader, UrlReadUnavailable
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import DeadlineExceededError, InvalidArgumentError
from remotelog.core.model import SegmentByteRange, TopicIdPartition
from remotelog.kafka.batches import BatchCutter, Batches
from remotelog.transforms.chunks import ChunkCodec, ChunkIndex, decode_range

# Bytes per ranged GET: large enough that S3's first-byte latency is a small part of
# each (8 MiB at 50 MB/s is 160 ms against 50 ms), small enough that `parallel` of them
# keep a task's memory bounded.
RANGE_BYTES = 8 * 1024 * 1024
# GETs in flight per reader: at 50 ms to first byte and 50 MB/s, one GET keeps a link
# about three quarters busy; four hide the latency.
PARALLEL_GETS = 4
# Tries of one GET before the rest is left to ReadOffsetRange.
MAX_GET_ATTEMPTS = 5
# A GET whose first byte comes later than this percentile of recent ones is hedged.
HEDGE_PERCENTILE = 95.0
# First-byte latencies kept, and how many before any GET is hedged.
_LATENCIES_KEPT = 256
_LATENCIES_BEFORE_HEDGING = 20
# Hedges come from a budget each GET adds to: one GET in 20 at most, over time, and no
# more than this many in a burst. A link every GET waits on makes every GET late, and
# hedging them all would slow it further.
_HEDGE_BUDGET_PER_GET = 0.05
_HEDGE_BUDGET_MAX = 10.0


class FirstByteLatencies:
    """Recent GETs' times to first byte, and the percentile past which one is hedged."""

    def __init__(self, percentile: float) -> None:
        if not 0 < percentile <= 100:
            raise InvalidArgumentError("hedge_percentile", f"{percentile}: from 0 (off) to 100")
        self.percentile = percentile
        self._seconds: collections.deque[float] = collections.deque(maxlen=_LATENCIES_KEPT)
        self._budget = _HEDGE_BUDGET_MAX

    def add(self, seconds: float) -> None:
        """A GET's first byte came after `seconds` (or had not by then, where its hedge
        answered first). Late GETs are samples too: kept only when under the threshold,
        the samples would pull it down, past the slow tail, until every GET was hedged."""
        self._seconds.append(seconds)
        self._budget = min(_HEDGE_BUDGET_MAX, self._budget + _HEDGE_BUDGET_PER_GET)

    def take_hedge(self) -> bool:
        """Whether a late GET may be hedged now, the hedge taken from the budget."""
        if self._budget < 1:
            return False
        self._budget -= 1
        return True

    def hedge_after(self) -> float | None:
        """Seconds a GET waits for its first byte before it is hedged; None: not yet known."""
        if len(self._seconds) < _LATENCIES_BEFORE_HEDGING:
            return None
        ordered = sorted(self._seconds)
        return ordered[min(len(ordered) - 1, int(len(ordered) * self.percentile / 100))]


# A GET under way and its first piece (None: it had none).
_Opened = tuple[AsyncGenerator[bytes, None], bytes | None]


@dataclass(frozen=True, slots=True)
class _Decoding:
    """How a GET of whole stored chunks, from `first_chunk` on, becomes original bytes
    `first`..`last` (inclusive) of the log."""

    codec: ChunkCodec
    index: ChunkIndex
    first_chunk: int
    first: int
    last: int

    def decode(self, stored: bytes) -> list[bytes]:
        return list(
            decode_range(self.codec, self.index, self.first_chunk, stored, self.first, self.last)
        )


@dataclass(frozen=True, slots=True)
class _Get:
    """Bytes `first`..`last` (inclusive) of a located segment's log object: of its log, or
    of the stored chunks `decoding` turns into the log's bytes."""

    located: SegmentByteRange
    first: int
    last: int
    decoding: _Decoding | None = None


def _chunk_gets(located: SegmentByteRange, range_bytes: int) -> list[_Get]:
    """The GETs of a range of a log stored as chunks: whole chunks, about `range_bytes`
    of stored bytes each (one chunk at least)."""
    assert located.chunks is not None
    chunks = LogChunks.of(located.segment, located.chunks)
    codec, index = chunks.codec(located.segment.remote_log_segment_id), chunks.index
    first, last = located.start_position, located.end_position - 1
    if last < first:
        return []
    number, last_chunk = index.chunks_of(first, last)
    gets = []
    while number <= last_chunk:
        upto = number
        while upto < last_chunk and _stored(index, number, upto + 1) <= range_bytes:
            upto += 1
        stored_first, stored_last = index.stored_range(number, upto)
        part = (
            max(first, number * index.chunk_size),
            min(last, (upto + 1) * index.chunk_size - 1),
        )
        decoding = _Decoding(codec, index, number, *part)
        gets.append(_Get(located, stored_first, stored_last, decoding))
        number = upto + 1
    return gets


def _stored(index: ChunkIndex, first_chunk: int, last_chunk: int) -> int:
    first, last = index.stored_range(first_chunk, last_chunk)
    return last - first + 1


class UrlRangeReader:
    def __init__(
        self,
        fetch: RemoteFetchClient,
        *,
        range_bytes: int = RANGE_BYTES,
        parallel: int = PARALLEL_GETS,
        backoff: ExponentialBackoff | None = None,
        timeout_s: float = 30.0,
        hedge_percentile: float = HEDGE_PERCENTILE,
    ) -> None:
        self.fetch = fetch
        self.range_bytes = range_bytes
        self.parallel = parallel
        self.backoff = backoff or fetch.options.backoff
        self.timeout_s = timeout_s
        # hedge_percentile 0: no GET is hedged.
        self._latencies = FirstByteLatencies(hedge_percentile) if hedge_percentile else None
        # GETs asked a second time, and the second ones that answered first.
        self.hedged = 0
        self.hedges_won = 0
        self._http = UrlReader()

    async def close(self) -> None:
        await self._http.close()

    async def read(
        self, partition: TopicIdPartition, start: int, end: int, *, chunk_bytes: int
    ) -> AsyncGenerator[Batches, None]:
        """Whole batches of [start, end), about `chunk_bytes` at a time, in offset order."""
        next_offset = start
        cutter: BatchCutter | None = None
        segment = None
        gets = self.ranges(partition, start, end)
        async with contextlib.aclosing(gets):
            async for located, pieces in gets:
                if located.segment is not segment:
                    if cutter is not None and (rest := _rest(cutter)) is not None:
                        next_offset = rest.last_offset + 1
                        yield rest
                    segment = located.segment
                    source = f"remote segment {segment.remote_log_segment_id} of {partition}"
                    cutter = BatchCutter(next_offset, source, end)
                assert cutter is not None
                for piece in pieces:
                    cutter.feed(piece)
                while cutter.buffered >= chunk_bytes or cutter.reached_end:
                    taken = cutter.take_pieces(chunk_bytes, at_least_one=True)
                    if taken is None:
                        break
                    next_offset = taken.last_offset + 1
                    yield taken.joined()
                if cutter.reached_end:
                    return
        if cutter is not None and (rest := _rest(cutter)) is not None:
            yield rest

    async def ranges(
        self, partition: TopicIdPartition, start: int, end: int
    ) -> AsyncGenerator[tuple[SegmentByteRange, list[bytes]], None]:
        """Each ranged GET's bytes, in order, with the segment they are of: `parallel`
        GETs on their way, the segments located as the GETs reach them."""
        gets = self._gets(partition, start, end)
        in_flight: collections.deque[tuple[_Get, asyncio.Task[list[bytes]]]] = collections.deque()
        ordered = _in_order(gets, in_flight, self.parallel, self._get)
        try:
            async for get, task in ordered:
                yield get.located, await task
        finally:
            await ordered.aclose()
            for _, task in in_flight:
                task.cancel()
            await asyncio.gather(*(task for _, task in in_flight), return_exceptions=True)
            await gets.aclose()

    async def _gets(
        self, partition: TopicIdPartition, start: int, end: int
    ) -> AsyncGenerator[_Get, None]:
        """The GETs of the range, segments located as the GETs reach them."""
        position = start
        while position < end:
            located = await self.fetch.locate_offset_range(
                partition, position, end, chunks_accepted=True, timeout_s=self.timeout_s
            )
            if not located:
                return
            for byte_range in located:
                if byte_range.chunks is not None:
                    for get in _chunk_gets(byte_range, self.range_bytes):
                        yield get
                    continue
                first = byte_range.start_position
                while first < byte_range.end_position:
                    last = min(first + self.range_bytes, byte_range.end_position) - 1
                    yield _Get(byte_range, first, last)
                    first = last + 1
            position = max(position, located[-1].segment.end_offset + 1)

    async def _get(self, get: _Get) -> list[bytes]:
        """One ranged GET's bytes. A failure, or an attempt that outlasts the timeout (a
        slow link shared by many GETs), is asked again from the byte it reached."""
        segment = get.located.segment
        what = f"segment {segment.remote_log_segment_id.id} of {segment.topic_id_partition}"
        pieces: list[bytes] = []
        position = get.first
        for attempt in range(MAX_GET_ATTEMPTS):
            try:
                reads, first = await self._opened(get.located.url, position, get.last, what)
                async with contextlib.aclosing(reads):
                    if first is not None:
                        pieces.append(first)
                        position += len(first)
                    async for piece in reads:
                        pieces.append(piece)
                        position += len(piece)
                if get.decoding is not None:
                    # Authenticated and decoded whole, off the event loop.
                    return await asyncio.to_thread(get.decoding.decode, b"".join(pieces))
                return pieces
            except (UrlReadUnavailable, DeadlineExceededError) as exc:
                refused = isinstance(exc, UrlReadUnavailable) and exc.refused
                if refused or attempt + 1 == MAX_GET_ATTEMPTS:
                    raise UrlReadUnavailable(str(exc), refused=refused) from exc
                await asyncio.sleep(self.backoff.backoff_ms(attempt) / 1000)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _opened(self, url: str, first: int, last: int, what: str) -> _Opened:
        """A GET of bytes `first`..`last` and its first piece (None: it had none), hedged
        by a second GET of the same bytes if the first piece is late."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        primary = asyncio.ensure_future(self._first_piece(url, first, last, what))
        hedge_after = self._latencies.hedge_after() if self._latencies is not None else None
        if hedge_after is not None:
            try:
                late = not (await asyncio.wait({primary}, timeout=hedge_after))[0]
            except BaseException:
                primary.cancel()
                await asyncio.gather(primary, return_exceptions=True)
                raise
            if late and self._latencies is not None and self._latencies.take_hedge():
                self.hedged += 1
                hedge = asyncio.ensure_future(self._first_piece(url, first, last, what))
                opened, hedge_won = await _first_answer(primary, hedge)
                self.hedges_won += hedge_won
                # The first GET's time, or as long as it had run when the hedge won; the
                # hedge's own time is not a sample: it was asked for because of a late one.
                self._latencies.add(loop.time() - started)
                return opened
        opened = await primary
        if self._latencies is not None:
            self._latencies.add(loop.time() - started)
        return opened

    async def _first_piece(self, url: str, first: int, last: int, what: str) -> _Opened:
        reads = self._http.read(url, first, last, what=what, timeout_s=self.timeout_s)
        try:
            return reads, await anext(reads, None)
        except BaseException:
            await reads.aclose()
            raise


async def _first_answer(
    primary: asyncio.Future[_Opened], hedge: asyncio.Future[_Opened]
) -> tuple[_Opened, bool]:
    """The GET of the two that answers first, and whether it was the hedge; the other is
    cancelled (closed if it answered too). If both fail, the later failure."""
    pending: set[asyncio.Future[_Opened]] = {primary, hedge}
    winner: asyncio.Future[_Opened] | None = None
    failure: BaseException | None = None
    try:
        while pending and winner is None:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in (primary, hedge):
                if task in done and (exc := task.exception()) is not None:
                    failure = exc
                elif task in done and winner is None:
                    winner = task
        if winner is None:
            assert failure is not None
            raise failure
        return winner.result(), winner is hedge
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in (primary, hedge):
            answered = task.done() and not task.cancelled() and task.exception() is None
            if task is not winner and answered:
                await task.result()[0].aclose()


async def _in_order(
    gets: AsyncIterator[_Get],
    in_flight: collections.deque[tuple[_Get, asyncio.Task[list[bytes]]]],
    parallel: int,
    start: Callable[[_Get], Coroutine[Any, Any, list[bytes]]],
) -> AsyncGenerator[tuple[_Get, asyncio.Task[list[bytes]]], None]:
    """Each GET and its task in order, taken off `in_flight` once it and up to
    `parallel - 1` after it are on their way."""
    exhausted = False
    while True:
        while not exhausted and len(in_flight) < parallel:
            try:
                get = await anext(gets)
            except StopAsyncIteration:
                exhausted = True
                break
            in_flight.append((get, asyncio.create_task(start(get))))
        if not in_flight:
            return
        yield in_flight.popleft()


def _rest(cutter: BatchCutter) -> Batches | None:
    """The whole batches left in a segment's cutter at the end of its bytes."""
    taken = cutter.take_pieces(cutter.buffered, at_least_one=True)
    return None if taken is None else taken.joined()
