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


Piece = bytes | memoryview


@dataclass(frozen=True, slots=True)
class Batches:
    """Whole batches cut from the stream: their bytes and their offset range.

    `data` is a view of the one chunk they were fed in when they came in one:
    the message that carries them copies them, so copying here too would be a
    second copy of every byte.
    """

    data: Piece
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class BatchPieces:
    """Whole batches as views of the chunks they were fed in, not yet copied together.

    A message that carries them joins the pieces once, into itself; joining
    here first and encoding after would copy every byte twice.
    """

    pieces: tuple[Piece, ...]
    size: int
    first_offset: int
    last_offset: int

    def joined(self) -> Batches:
        """One buffer: the piece itself when there is one (a view of a fed chunk, or the chunk)."""
        (only, *more) = self.pieces
        data = only if not more else b"".join(self.pieces)
        return Batches(data, self.first_offset, self.last_offset)


class BatchCutter:
    """Feed bytes of a segment from a batch boundary; take whole batches out.

    Batches that end before `from_offset` are dropped (the index points at or
    before the wanted batch); `take` stops at `until_offset` (exclusive), at a
    byte limit, or where the bytes fed so far end.

    The unread bytes stay in the chunks they were fed in (a list, the first
    one read from `_start`), never copied into a growing buffer: a batch that
    straddles two chunks is handed out as a view of each. Only a header that
    straddles two chunks is copied, its 61 bytes, to be read.
    """

    def __init__(self, from_offset: int, source: str, until_offset: int | None = None) -> None:
        self.from_offset = from_offset
        self.until_offset = until_offset
        self.source = source
        self._chunks: list[Piece] = []
        self._start = 0  # first unread byte of _chunks[0]
        self.buffered = 0  # unread bytes in all chunks
        self._consumed = 0  # stream position of the first unread byte, for error messages
        self._skip = 0  # bytes still to come of a batch dropped before from_offset
        self.reached_end = False  # a batch at or past until_offset was seen

    def feed(self, data: Piece) -> None:
        start = 0
        if self._skip:  # only ever set with nothing buffered
            start = min(self._skip, len(data))
            self._skip -= start
            self._consumed += start
        if start < len(data):
            if not self._chunks:
                self._start = start
            self._chunks.append(data)
            self.buffered += len(data) - start

    def next_batch_size(self) -> int | None:
        """Size of the next wanted batch once its header has arrived (older ones are dropped)."""
        self._drop_before_start()
        if self.buffered < HEADER_BYTES:
            return None
        return self._size_of(*self._header(0), 0)

    def _header(self, at: int) -> tuple[Piece, int]:
        """(buffer, position in it) of the HEADER_BYTES at unread position `at` (buffered)."""
        position = self._start + at
        for chunk in self._chunks:
            if position + HEADER_BYTES <= len(chunk):
                return chunk, position
            if position < len(chunk):
                break
            position -= len(chunk)
        # Straddles chunks: copy just the header.
        pieces = self._pieces(at, HEADER_BYTES)
        return b"".join(pieces), 0

    def _pieces(self, at: int, size: int) -> list[Piece]:
        """Views of the unread bytes [at, at + size), without consuming them."""
        out: list[Piece] = []
        position = self._start + at
        for chunk in self._chunks:
            if position >= len(chunk):
                position -= len(chunk)
                continue
            end = min(len(chunk), position + size)
            out.append(
                chunk if position == 0 and end == len(chunk) else memoryview(chunk)[position:end]
            )
            size -= end - position
            position = 0
            if not size:
                break
        return out

    def _consume(self, size: int) -> None:
        self._consumed += size
        self.buffered -= size
        start = self._start + size
        chunks = self._chunks
        while chunks and start >= len(chunks[0]):
            start -= len(chunks.pop(0))
        self._start = start

    def _size_of(self, buffer: Piece, position: int, at: int) -> int:
        _, length = _OVERHEAD.unpack_from(buffer, position)
        if length < HEADER_BYTES - LOG_OVERHEAD:
            raise CorruptRecordError(
                "records",
                f"{self.source}: position {self._consumed + at}: batch length {length} "
                "is below the minimum",
            )
        if buffer[position + _MAGIC_AT] != 2:
            raise CorruptRecordError(
                "records",
                f"{self.source}: position {self._consumed + at}: unsupported magic "
                f"{buffer[position + _MAGIC_AT]}",
            )
        return LOG_OVERHEAD + int(length)

    @staticmethod
    def _offsets_of(buffer: Piece, position: int) -> tuple[int, int]:
        base = _OVERHEAD.unpack_from(buffer, position)[0]
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(buffer, position + _LAST_OFFSET_DELTA_AT)
        return base, base + delta

    def _drop_before_start(self) -> None:
        at = 0
        while self.buffered - at >= HEADER_BYTES:
            buffer, position = self._header(at)
            size = self._size_of(buffer, position, at)
            if self._offsets_of(buffer, position)[1] >= self.from_offset:
                break
            if self.buffered - at < size:
                # Before the start and not all here: drop what is, skip the rest as it comes.
                self._skip = size - (self.buffered - at)
                at = self.buffered
                break
            at += size
        if at:
            self._consume(at)

    def take(self, max_bytes: int, *, at_least_one: bool = False) -> Batches | None:
        """Whole batches from the front, at most `max_bytes` (or one bigger when allowed)."""
        taken = self.take_pieces(max_bytes, at_least_one=at_least_one)
        return None if taken is None else taken.joined()

    def take_pieces(self, max_bytes: int, *, at_least_one: bool = False) -> BatchPieces | None:
        """As take(), the batches left as views of the chunks they came in."""
        self._drop_before_start()
        at, end = 0, self.buffered
        first = last = -1
        while end - at >= HEADER_BYTES:
            buffer, position = self._header(at)
            size = self._size_of(buffer, position, at)
            if end - at < size:
                break
            base, batch_last = self._offsets_of(buffer, position)
            if self.until_offset is not None and base >= self.until_offset:
                self.reached_end = True
                break
            if at + size > max_bytes and not (at_least_one and at == 0):
                break
            if first < 0:
                first = base
            last = batch_last
            at += size
            if self.until_offset is not None and batch_last >= self.until_offset - 1:
                self.reached_end = True
                break
        if at == 0:
            return None
        pieces = self._pieces(0, at)
        self._consume(at)
        return BatchPieces(tuple(pieces), at, first, last)
