"""Cutting a stream of segment bytes into whole record batches, without decoding them.

The segment store streams byte ranges; a remote read answers with whole v2
batches. Only the 12-byte log overhead (base offset, length) and the last
offset delta of each batch are read; the bytes go out as they came in, so the
answer is byte-identical to the stored segment. The magic byte is checked so
that garbage is reported as corrupt rather than served.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from remotelog.core.errors import CorruptRecordError

_OVERHEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA = struct.Struct(">i")
_MAGIC_AT = 16
_LAST_OFFSET_DELTA_AT = 23
HEADER_BYTES = 61
LOG_OVERHEAD = 12


@dataclass(frozen=True, slots=True)
class Batches:
    """Whole batches cut from the stream: their bytes and their offset range."""

    data: bytes
    first_offset: int
    last_offset: int


class BatchCutter:
    """Feed bytes of a segment from a batch boundary; take whole batches out.

    Batches that end before `from_offset` are dropped (the index points at or
    before the wanted batch); `take` stops at `until_offset` (exclusive), at a
    byte limit, or where the bytes fed so far end.

    The unread bytes are one `bytes` object and a start position, not a
    growing buffer: a chunk fed when nothing is pending is kept as it is, so a
    Fetch answered from one chunk costs one copy (none when it takes the whole
    chunk), and only a batch straddling two chunks makes the next one copied.
    """

    def __init__(self, from_offset: int, source: str, until_offset: int | None = None) -> None:
        self.from_offset = from_offset
        self.until_offset = until_offset
        self.source = source
        self._data = b""
        self._start = 0  # first unread byte of _data
        self._consumed = 0  # stream position of _data[_start], for error messages
        self._skip = 0  # bytes still to come of a batch dropped before from_offset
        self.reached_end = False  # a batch at or past until_offset was seen

    def feed(self, data: bytes) -> None:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            self._consumed += dropped
            data = data[dropped:]
        if self._start == len(self._data):
            self._data, self._start = data, 0
        elif data:
            self._data, self._start = self._data[self._start :] + data, 0

    @property
    def buffered(self) -> int:
        return len(self._data) - self._start

    def next_batch_size(self) -> int | None:
        """Size of the next wanted batch once its header has arrived (older ones are dropped)."""
        self._drop_before_start()
        if self.buffered < HEADER_BYTES:
            return None
        return self._size_at(self._start)

    def _size_at(self, at: int) -> int:
        _, length = _OVERHEAD.unpack_from(self._data, at)
        if length < HEADER_BYTES - LOG_OVERHEAD:
            raise CorruptRecordError(
                "records",
                f"{self.source}: position {self._position(at)}: batch length {length} "
                "is below the minimum",
            )
        if len(self._data) > at + _MAGIC_AT and self._data[at + _MAGIC_AT] != 2:
            raise CorruptRecordError(
                "records",
                f"{self.source}: position {self._position(at)}: unsupported magic "
                f"{self._data[at + _MAGIC_AT]}",
            )
        return LOG_OVERHEAD + int(length)

    def _position(self, at: int) -> int:
        return self._consumed + at - self._start

    def _last_offset_at(self, at: int) -> tuple[int, int]:
        base = _OVERHEAD.unpack_from(self._data, at)[0]
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(self._data, at + _LAST_OFFSET_DELTA_AT)
        return base, base + delta

    def _advance(self, to: int) -> None:
        self._consumed += to - self._start
        self._start = to

    def _drop_before_start(self) -> None:
        at, end = self._start, len(self._data)
        while end - at >= HEADER_BYTES:
            size = self._size_at(at)
            if self._last_offset_at(at)[1] >= self.from_offset:
                break
            if end - at < size:
                # Before the start and not all here: drop what is, skip the rest as it comes.
                self._skip = size - (end - at)
                at = end
                break
            at += size
        self._advance(at)

    def take(self, max_bytes: int, *, at_least_one: bool = False) -> Batches | None:
        """Whole batches from the front, at most `max_bytes` (or one bigger when allowed)."""
        self._drop_before_start()
        start = at = self._start
        end = len(self._data)
        first = last = -1
        while end - at >= HEADER_BYTES:
            size = self._size_at(at)
            if end - at < size:
                break
            base, batch_last = self._last_offset_at(at)
            if self.until_offset is not None and base >= self.until_offset:
                self.reached_end = True
                break
            if at - start + size > max_bytes and not (at_least_one and at == start):
                break
            if first < 0:
                first = base
            last = batch_last
            at += size
            if self.until_offset is not None and batch_last >= self.until_offset - 1:
                self.reached_end = True
                break
        if at == start:
            return None
        data = self._data[start:at]  # one copy; none when it is the whole chunk
        self._advance(at)
        if self._start == end:
            self._data, self._start = b"", 0
        return Batches(data, first, last)
