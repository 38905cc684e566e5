"""Kafka's segment indexes: offset index, time index, transaction index.

.index      8-byte entries: relative offset i32 (offset - base offset), position i32;
           12-byte entries after KIP-1333 (metadata version 4.4-IV1, segments past
           2 GiB): relative offset i32, position i64
.timeindex 12-byte entries: timestamp i64, relative offset i32
.txnindex  34-byte entries: version i16 (0), producer id i64, first offset i64,
           last offset i64, last stable offset i64
All big-endian. An active segment's index may be preallocated with zeros: the
entries end at the first all-zero entry after the first one. Lookups are
hints, as in Kafka: the reader scans the log forward from the returned point.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass

OFFSET_ENTRY = struct.Struct(">ii")
WIDE_OFFSET_ENTRY = struct.Struct(">iq")
OFFSET_ENTRIES = (OFFSET_ENTRY, WIDE_OFFSET_ENTRY)
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")
TXN_VERSION = 0


class CorruptIndexError(ValueError):
    """An index file that fails validation; the message names it and the entry."""


def _entries(data: bytes, entry: struct.Struct, source: str) -> list[tuple[int, ...]]:
    if len(data) % entry.size:
        raise CorruptIndexError(
            f"{source}: size {len(data)} is not a multiple of the {entry.size}-byte entry"
        )
    zero = bytes(entry.size)
    out = []
    for position in range(0, len(data), entry.size):
        raw = data[position : position + entry.size]
        if raw == zero and position > 0:
            break  # preallocated tail of an active segment's index
        out.append(entry.unpack(raw))
    return out


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    offset: int
    position: int


def _is_index_of(data: bytes, entry: struct.Struct, log_size: int | None) -> bool:
    """Whether `data` read as `entry`s is a valid offset index: offsets and positions rising."""
    offset = position = -1
    for number, (relative, at) in enumerate(_entries(data, entry, "")):
        if relative < 0 or at < 0 or (number and (relative <= offset or at <= position)):
            return False
        if log_size is not None and at >= log_size:
            return False
        offset, position = relative, at
    return True


def offset_entry_of(data: bytes, log_size: int | None = None) -> struct.Struct:
    """The entry format of an offset index, told by its size: the one of 8 or 12 bytes
    that divides it. A size both divide is read both ways, and the way that makes a
    valid index of the log's `log_size` bytes wins; neither, and it is read as 8-byte
    entries (where parsing then says what is wrong). Read as the other, either format
    has offsets or positions that go backwards or past the log."""
    fits = [entry for entry in OFFSET_ENTRIES if len(data) % entry.size == 0]
    if len(fits) == 1:
        return fits[0]
    for entry in fits:
        if _is_index_of(data, entry, log_size):
            return entry
    return OFFSET_ENTRY


class OffsetIndex:
    """Sparse offset -> file position map of one segment, in either entry format."""

    def __init__(
        self,
        base_offset: int,
        entries: Sequence[OffsetPosition] = (),
        entry: struct.Struct = OFFSET_ENTRY,
    ) -> None:
        self.base_offset = base_offset
        self.entries = list(entries)
        self.entry = entry
        self._offsets = [e.offset for e in self.entries]

    @classmethod
    def parse(
        cls,
        data: bytes,
        base_offset: int,
        source: str = "<index>",
        log_size: int | None = None,
    ) -> OffsetIndex:
        """`log_size`, where known, tells apart a size both entry formats divide."""
        if len(data) % OFFSET_ENTRY.size and len(data) % WIDE_OFFSET_ENTRY.size:
            raise CorruptIndexError(
                f"{source}: size {len(data)} is not a multiple of the 8- or 12-byte entry"
            )
        entry = offset_entry_of(data, log_size)
        entries: list[OffsetPosition] = []
        previous = -1
        for number, (relative, position) in enumerate(_entries(data, entry, source)):
            if relative < 0 or position < 0 or (number and relative <= previous):
                raise CorruptIndexError(
                    f"{source}: entry {number}: relative offset {relative}, position {position} "
                    "is negative or not increasing"
                )
            previous = relative
            entries.append(OffsetPosition(base_offset + relative, position))
        return cls(base_offset, entries, entry)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= target, else (base offset, 0)."""
        i = bisect.bisect_right(self._offsets, target_offset)
        return self.entries[i - 1] if i else OffsetPosition(self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        if self.entries and offset <= self.entries[-1].offset:
            raise ValueError(f"offset {offset} is not above the last entry {self.entries[-1]}")
        self.entries.append(OffsetPosition(offset, position))
        self._offsets.append(offset)

    def to_bytes(self, entry: struct.Struct | None = None) -> bytes:
        """In this index's own entry format, or in `entry`'s."""
        pack = (entry or self.entry).pack
        return b"".join(pack(e.offset - self.base_offset, e.position) for e in self.entries)

    def check_against_segment_end(self, segment_size: int, source: str) -> None:
        for number, entry in enumerate(self.entries):
            if entry.position >= segment_size:
                raise CorruptIndexError(
                    f"{source}: entry {number} points at position {entry.position}, past the "
                    f"log's {segment_size} bytes"
                )


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


class TimeIndex:
    """Sparse max-timestamp -> offset map of one segment."""

    def __init__(self, base_offset: int, entries: Sequence[TimestampOffset] = ()) -> None:
        self.base_offset = base_offset
        self.entries = list(entries)
        self._timestamps = [e.timestamp for e in self.entries]

    @classmethod
    def parse(cls, data: bytes, base_offset: int, source: str = "<timeindex>") -> TimeIndex:
        entries: list[TimestampOffset] = []
        for number, (timestamp, relative) in enumerate(_entries(data, TIME_ENTRY, source)):
            if relative < 0:
                raise CorruptIndexError(f"{source}: entry {number}: negative relative offset")
            if entries and timestamp < entries[-1].timestamp:
                raise CorruptIndexError(f"{source}: entry {number}: timestamp goes backwards")
            entries.append(TimestampOffset(timestamp, base_offset + relative))
        return cls(base_offset, entries)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= target, else (-1, base offset)."""
        i = bisect.bisect_right(self._timestamps, target_timestamp)
        return self.entries[i - 1] if i else TimestampOffset(-1, self.base_offset)

    def append(self, timestamp: int, offset: int) -> bool:
        """Kafka's maybeAppend: only a new maximum timestamp makes an entry."""
        if self.entries and timestamp <= self.entries[-1].timestamp:
            return False
        self.entries.append(TimestampOffset(timestamp, offset))
        self._timestamps.append(timestamp)
        return True

    def to_bytes(self) -> bytes:
        return b"".join(
            TIME_ENTRY.pack(e.timestamp, e.offset - self.base_offset) for e in self.entries
        )


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def parse_transaction_index(data: bytes, source: str = "<txnindex>") -> list[AbortedTxn]:
    if len(data) % TXN_ENTRY.size:
        raise CorruptIndexError(
            f"{source}: size {len(data)} is not a multiple of the {TXN_ENTRY.size}-byte entry"
        )
    out = []
    for number, fields in enumerate(TXN_ENTRY.iter_unpack(data)):
        version, producer_id, first, last, lso = fields
        if version != TXN_VERSION:
            raise CorruptIndexError(f"{source}: entry {number}: unknown version {version}")
        if last < first:
            raise CorruptIndexError(f"{source}: entry {number}: last offset below first offset")
        out.append(AbortedTxn(producer_id, first, last, lso))
    return out


def transaction_index_bytes(entries: Sequence[AbortedTxn]) -> bytes:
    return b"".join(
        TXN_ENTRY.pack(
            TXN_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
        )
        for e in entries
    )


def _floor_entry(
    buffer: bytes | memoryview | mmap.mmap, entry: struct.Struct, key_at: int, target: int
) -> int:
    """Index of the last entry whose field at `key_at` is <= target, or -1; O(log n), no parse."""
    low, high = 0, len(buffer) // entry.size - 1
    found = -1
    unpack = entry.unpack_from
    while low <= high:
        middle = (low + high) // 2
        if unpack(buffer, middle * entry.size)[key_at] <= target:
            found, low = middle, middle + 1
        else:
            high = middle - 1
    return found


def lookup_offset_in(
    buffer: bytes | memoryview | mmap.mmap,
    base_offset: int,
    target_offset: int,
    entry: struct.Struct = OFFSET_ENTRY,
) -> OffsetPosition:
    """OffsetIndex.lookup straight on a validated, trimmed `.index` buffer (e.g. an mmap)
    of `entry`s."""
    found = _floor_entry(buffer, entry, 0, target_offset - base_offset)
    if found < 0:
        return OffsetPosition(base_offset, 0)
    relative, position = entry.unpack_from(buffer, found * entry.size)
    return OffsetPosition(base_offset + relative, position)


def position_after_in(
    buffer: bytes | memoryview | mmap.mmap,
    base_offset: int,
    last_offset: int,
    log_size: int,
    entry: struct.Struct = OFFSET_ENTRY,
) -> int:
    """A batch boundary at or after the end of the batch holding `last_offset`.

    Kafka indexes a batch's last offset at the batch's start. The first entry at
    or past `last_offset` starts the batch holding it or a later one; the entry
    after that starts past both. Without one, the log's end."""
    following = _floor_entry(buffer, entry, 0, last_offset - 1 - base_offset) + 2
    if following >= len(buffer) // entry.size:
        return log_size
    return int(entry.unpack_from(buffer, following * entry.size)[1])


def lookup_timestamp_in(
    buffer: bytes | memoryview | mmap.mmap, base_offset: int, target_timestamp: int
) -> TimestampOffset:
    """TimeIndex.lookup straight on a validated, trimmed `.timeindex` buffer."""
    found = _floor_entry(buffer, TIME_ENTRY, 0, target_timestamp)
    if found < 0:
        return TimestampOffset(-1, base_offset)
    timestamp, relative = TIME_ENTRY.unpack_from(buffer, found * TIME_ENTRY.size)
    return TimestampOffset(timestamp, base_offset + relative)
