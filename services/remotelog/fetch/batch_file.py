"""Whole record batches of a stored segment file, read straight into the message that carries them.

A bulk read (ReadOffsetRange) whose segment store lends it the log's file (the
short circuit, or the filesystem backend read directly) does not need the
cutter's walk over mapped views (batches.py): each message is one bytes object,
its batches read into it where they belong, between a frame written around
them. Against the mapped path this saves the kernel's page-table work for
every page of the mapping (a twentieth of the service's CPU) and the
interpreter's work per batch.

The message is ReadOffsetRangeResponse's wire form as its codec writes it
(records, then first_offset and last_offset, zeros omitted) with
one difference: the records' length is a varint of fixed width, four bytes
padded with continuation bits. The length is known only once the batches are
walked, after they are read into place; protobuf's parsers (and bulk_wire's
decoder) accept a padded varint, as the encoding allows.

`read_batches` is compiled (_batchfile.c); `_read_batches_python` is the
reference and the fallback, with the same answers and the same errors. Both
raise BlockingIOError, with `nowait`, rather than wait for a disk.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass

from remotelog.core.errors import CorruptRecordError, RemoteStorageError
from remotelog.fileio.pagecache import pread_cached
from remotelog.kafka.batches import HEADER_BYTES, LOG_OVERHEAD
from remotelog.protocol import bulk_wire
from remotelog.protocol.codecs import READ_OFFSET_RANGE_RESPONSE

# ReadOffsetRangeResponse's records, first_offset and last_offset, from its descriptor.
RECORDS_FIELD = READ_OFFSET_RANGE_RESPONSE.data_number
FIRST_OFFSET_FIELD, LAST_OFFSET_FIELD = READ_OFFSET_RANGE_RESPONSE.integer_numbers
_PEEK_BYTES = 27  # a batch header through its last offset delta
_MAGIC_AT = 16
_LAST_OFFSET_DELTA_AT = 23
_MAX_DATA = 1 << 28  # what a 4-byte varint holds

# (message or None, its batches' bytes, next position, first offset, last offset,
#  reached the end offset)
RawRead = tuple[bytes | None, int, int, int, int, bool]
# position, limit, max bytes, from offset, until offset, the three field numbers
_Args = tuple[int, int, int, int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class BatchMessage:
    """Whole batches, already encoded as the ReadOffsetRangeResponse that carries them."""

    message: bytes
    size: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class FileRead:
    """One read: a message (None: no whole batch at the position), where the next starts,
    and whether a batch at or past the end offset was met."""

    message: BatchMessage | None
    next_position: int
    reached_end: bool


class _Walk:
    """The reference's reads: exactly `length` bytes or the reason not."""

    def __init__(self, fd: int, limit: int, nowait: bool) -> None:
        self.fd, self.limit, self.nowait = fd, limit, nowait

    def read(self, length: int, offset: int) -> bytes:
        data = pread_cached(self.fd, length, offset) if self.nowait else None
        if self.nowait and data is None:
            raise BlockingIOError("not all in the page cache")
        if data is None:
            data = os.pread(self.fd, length, offset)
        if len(data) < length:  # where the file ends, not where this read began
            size = os.fstat(self.fd).st_size
            raise EOFError(f"the stored log ended at byte {size}, before {self.limit}")
        return data

    def peek(self, at: int) -> tuple[int, int, int] | None:
        """(base offset, last offset, size) of the whole batch at `at`; None at the end."""
        if self.limit - at < HEADER_BYTES:
            return None
        header = self.read(_PEEK_BYTES, at)
        length = int.from_bytes(header[8:12], "big", signed=True)
        if length < HEADER_BYTES - LOG_OVERHEAD:
            raise ValueError(f"position {at}: batch length {length} is below the minimum")
        if header[_MAGIC_AT] != 2:
            raise ValueError(f"position {at}: unsupported magic {header[_MAGIC_AT]}")
        base = int.from_bytes(header[:8], "big", signed=True)
        delta = int.from_bytes(header[_LAST_OFFSET_DELTA_AT:_PEEK_BYTES], "big", signed=True)
        size = LOG_OVERHEAD + length
        return (base, base + delta, size) if at + size <= self.limit else None


def _read_batches_python(
    fd: int,
    position: int,
    limit: int,
    max_bytes: int,
    from_offset: int,
    until_offset: int,
    data_field: int,
    first_field: int,
    last_field: int,
    nowait: bool,
) -> RawRead:
    """The batches at `position` (or the first after it ending at or after `from_offset`)
    within `max_bytes` (at least one), to `until_offset` (exclusive; -1: no end), below
    `limit`, as one message; the compiled function's reference."""
    if (
        position < 0
        or max_bytes < 1
        or not all(0 < f < 16 for f in (data_field, first_field, last_field))
    ):
        raise ValueError(
            "read_batches: negative position, max_bytes below 1, or a field number outside 1..15"
        )
    walk = _Walk(fd, limit, nowait)
    batch = walk.peek(position)
    while batch is not None and batch[1] < from_offset:
        position += batch[2]
        batch = walk.peek(position)
    end, first, last, reached_end = position, 0, 0, False
    while batch is not None:
        base, batch_last, size = batch
        if until_offset >= 0 and base >= until_offset:
            reached_end = True
            break
        if end > position and end + size - position > max_bytes:
            break
        first = base if end == position else first
        last = batch_last
        end += size
        if until_offset >= 0 and batch_last >= until_offset - 1:
            reached_end = True
            break
        batch = walk.peek(end)
    if end == position:
        return None, 0, position, 0, 0, reached_end
    if end - position >= _MAX_DATA:
        raise OverflowError(
            f"read_batches: {end - position} bytes of batches exceed what a message frames"
        )
    data = walk.read(end - position, position)
    size = len(data)
    frame = bytes(
        [data_field << 3 | 2, *((size >> 7 * i & 0x7F) | (0x80 if i < 3 else 0) for i in range(4))]
    )
    trailer = [
        *bulk_wire.varint_field(first_field, first),
        *bulk_wire.varint_field(last_field, last),
    ]
    return b"".join([frame, data, *trailer]), size, end, first, last, reached_end


COMPILED = False
read_batches: Callable[[int, int, int, int, int, int, int, int, int, bool], RawRead]
try:
    from remotelog.fetch import _batchfile  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the Python reference
    read_batches = _read_batches_python
else:
    read_batches, COMPILED = _batchfile.read_batches, True


async def read_batch_message(
    fd: int,
    position: int,
    limit: int,
    *,
    max_bytes: int,
    from_offset: int,
    until_offset: int | None,
    source: str,
) -> FileRead:
    """read_batches as a ReadOffsetRangeResponse: on the event loop when the bytes are all
    page-cached (a copy of a message's 2 MiB costs less than a hop to a thread), on a
    thread otherwise. Corrupt batches raise CorruptRecordError, a failed or short read
    RemoteStorageError (retried by the caller), both naming `source`."""
    args: _Args = (
        position,
        limit,
        max_bytes,
        from_offset,
        -1 if until_offset is None else until_offset,
        RECORDS_FIELD,
        FIRST_OFFSET_FIELD,
        LAST_OFFSET_FIELD,
    )
    try:
        try:
            message, size, following, first, last, reached_end = read_batches(fd, *args, True)
        except BlockingIOError:
            message, size, following, first, last, reached_end = await _on_thread(fd, args)
    except ValueError as exc:
        raise CorruptRecordError("records", f"{source}: {exc}") from None
    except (EOFError, OSError) as exc:
        raise RemoteStorageError(f"{source}: {exc}") from exc
    if message is None:
        return FileRead(None, following, reached_end)
    return FileRead(BatchMessage(message, size, first, last), following, reached_end)


async def _on_thread(fd: int, args: _Args) -> RawRead:
    # The thread's own descriptor: a read cancelled with its caller runs on, and
    # the caller's descriptor may be closed and its number reused meanwhile.
    own = os.dup(fd)

    def run() -> RawRead:
        try:
            return read_batches(own, *args, False)
        finally:
            os.close(own)

    return await asyncio.to_thread(run)
