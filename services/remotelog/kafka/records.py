"""Kafka record batches, magic v2 (DefaultRecordBatch), read and written byte-exactly.

Batch header, 61 bytes, big-endian:
  0 baseOffset i64 | 8 batchLength i32 (bytes after this field) | 12 partitionLeaderEpoch i32
  16 magic i8 | 17 crc u32 (CRC-32C of bytes 21..end) | 21 attributes i16
  23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64 | 43 producerId i64
  51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records
Attributes: bits 0-2 codec, bit 3 LogAppendTime, bit 4 transactional, bit 5 control.
Each record: varint length, i8 attributes, varlong timestampDelta, varint
offsetDelta, varint key length (-1 = null) + key, varint value length + value,
varint header count, then (varint key length + key, varint value length + value).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import crc32c

from remotelog.kafka.codecs import CodecError, CompressionType, compress, decompress

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC = 2
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21

TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
NO_PRODUCER_ID = -1


class CorruptBatchError(ValueError):
    """A batch that fails validation; the message names the source and position."""


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 batch, plus where the batch sits in its source.

    A NamedTuple rather than a dataclass: one is built per batch on the read
    path, and tuple construction is several times cheaper.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & 0x07)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)


def _parse_header(data: memoryview, position: int, source: str) -> BatchHeader:
    header = BatchHeader._make((*_HEADER.unpack_from(data, position), position))
    if header.magic != MAGIC:
        raise CorruptBatchError(f"{source}: position {position}: unsupported magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatchError(
            f"{source}: position {position}: batch length {header.batch_length} is below the "
            f"{HEADER_SIZE - LOG_OVERHEAD}-byte minimum"
        )
    if header.attributes & 0x07 > CompressionType.ZSTD:
        raise CorruptBatchError(
            f"{source}: position {position}: unknown compression codec {header.attributes & 0x07}"
        )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptBatchError(
            f"{source}: position {position}: negative records count or last offset delta"
        )
    return header


# batchLength at 8, magic at 16, attributes at 21
_LENGTH_MAGIC_ATTRIBUTES = struct.Struct(">8xi4xb4xh")


def batches_compressed(data: bytes | bytearray | memoryview) -> bool:
    """Whether every batch whose header lies whole in `data` (a segment's first bytes)
    was compressed by its producer, from the batch attributes alone; False where no
    header is whole, or on bytes that are no batches."""
    position, seen = 0, 0
    while position + HEADER_SIZE <= len(data):
        batch_length, magic, attributes = _LENGTH_MAGIC_ATTRIBUTES.unpack_from(data, position)
        if magic != MAGIC or batch_length < HEADER_SIZE - LOG_OVERHEAD or not attributes & 0x07:
            return False
        seen += 1
        position += LOG_OVERHEAD + batch_length
    return seen > 0


def iter_batches(
    data: bytes | bytearray | memoryview,
    *,
    source: str = "<bytes>",
    verify_crc: bool = True,
    start: int = 0,
) -> Iterator[BatchHeader]:
    """Shallow iteration: batch headers only, never copying the segment.

    A truncated final batch, a bad magic, length or CRC raises
    CorruptBatchError naming `source` and the byte position.
    """
    return _batch_iterator(data, source, crc32c.crc32c if verify_crc else None, start)


def iter_batches_python(
    data: bytes | bytearray | memoryview,
    source: str,
    crc: Callable[[memoryview], int] | None,
    start: int,
) -> Iterator[BatchHeader]:
    """The reference shallow iterator (`_fastrecords.BatchIterator` is it compiled)."""
    if start < 0:
        raise ValueError("start must not be negative")
    view = memoryview(data)
    position = start
    end = len(view)
    while position < end:
        if end - position < HEADER_SIZE:
            raise CorruptBatchError(
                f"{source}: position {position}: truncated batch header "
                f"({end - position} of {HEADER_SIZE} bytes)"
            )
        header = _parse_header(view, position, source)
        if position + header.size > end:
            raise CorruptBatchError(
                f"{source}: position {position}: batch of {header.size} bytes passes the end "
                f"of the data at {end}"
            )
        if crc is not None:
            actual = crc(view[position + _CRC_START : position + header.size])
            if actual != header.crc:
                raise CorruptBatchError(
                    f"{source}: position {position}: CRC-32C mismatch "
                    f"(stored {header.crc:#010x}, computed {actual:#010x})"
                )
        yield header
        position += header.size


class Record(NamedTuple):
    """One record, with absolute offset and timestamp (a NamedTuple: built per record)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _varint(data: bytes, pos: int, where: str) -> tuple[int, int]:
    """Zig-zag varlong at `pos`: (value, next position)."""
    result = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise CorruptBatchError(f"{where}: truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        if shift == 56 and data[pos : pos + 1] > b"\x01":  # a 10th byte past 64 bits
            raise CorruptBatchError(f"{where}: varint longer than 10 bytes")
        shift += 7
        if shift > 63:
            raise CorruptBatchError(f"{where}: varint longer than 10 bytes")


def _field(data: bytes, pos: int, where: str) -> tuple[bytes | None, int]:
    """A varint-length-prefixed byte field (-1 = null): (value, next position)."""
    byte = data[pos] if pos < len(data) else 0x80
    if byte < 0x80:  # one-byte length: the common case, decoded inline
        length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
    else:
        length, pos = _varint(data, pos, where)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(data):
        raise CorruptBatchError(f"{where}: field of {length} bytes passes the end")
    return data[pos:end], end


def _decompress_body(
    data: bytes | bytearray | memoryview, header: BatchHeader, source: str
) -> bytes:
    """The records of a compressed batch, decompressed."""
    body = memoryview(data)[header.position + HEADER_SIZE : header.position + header.size]
    try:
        return decompress(header.compression, body)
    except CodecError as exc:
        raise CorruptBatchError(f"{source}: batch at position {header.position}: {exc}") from None


def decode_records_python(
    data: bytes | bytearray | memoryview, header: BatchHeader, *, source: str = "<bytes>"
) -> list[Record]:
    """Full decode of the records of the batch `header` describes within `data`.

    The reference decoder; `_fastrecords.decode_records` is it compiled, with
    the same checks and messages, and serves as `decode_records` when built.
    """
    body = _decompress_body(data, header, source) if header.attributes & 0x07 else None
    where = f"{source}: batch at position {header.position}"
    if body is None:
        start, end = header.position + HEADER_SIZE, header.position + header.size
        if header.position < 0 or end > len(data):
            raise CorruptBatchError(f"{where}: batch passes the end of the data")
        body = bytes(data[start:end])
    # Every record takes at least 7 bytes: a corrupt count allocates no more than that.
    if header.records_count > len(body) // 7 + 1:
        raise CorruptBatchError(
            f"{where}: records count {header.records_count} does not fit in {len(body)} bytes"
        )
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.is_log_append_time
    records = []
    size = len(body)
    pos = 0
    for _ in range(header.records_count):
        length, pos = _varint(body, pos, where)
        record_end = pos + length
        if length < 0 or record_end > size:
            raise CorruptBatchError(f"{where}: record of {length} bytes passes the end")
        pos += 1  # record attributes: unused in v2
        timestamp_delta, pos = _varint(body, pos, where)
        offset_delta, pos = _varint(body, pos, where)
        key, pos = _field(body, pos, where)
        value, pos = _field(body, pos, where)
        header_count, pos = _varint(body, pos, where)
        if header_count < 0 or header_count > length:
            raise CorruptBatchError(f"{where}: bad header count {header_count}")
        headers = []
        for _ in range(header_count):
            header_key, pos = _field(body, pos, where)
            if header_key is None:
                raise CorruptBatchError(f"{where}: null header key")
            header_value, pos = _field(body, pos, where)
            headers.append((header_key.decode("utf-8", "replace"), header_value))
        if pos != record_end:
            raise CorruptBatchError(f"{where}: record length {length} disagrees with its fields")
        timestamp = header.max_timestamp if log_append_time else base_timestamp + timestamp_delta
        records.append(Record(base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    if pos != size:
        raise CorruptBatchError(f"{where}: {size - pos} bytes after the last record")
    return records


class _RecordDecoder(Protocol):
    def __call__(
        self, data: bytes | bytearray | memoryview, header: BatchHeader, *, source: str = ...
    ) -> list[Record]: ...


# The compiled paths, built by hatch_build.py; without a C compiler at install
# time, the reference functions above serve.
_batch_iterator: Callable[
    [bytes | bytearray | memoryview, str, Callable[[memoryview], int] | None, int],
    Iterator[BatchHeader],
]
decode_records: _RecordDecoder
try:
    from remotelog.kafka import _fastrecords  # type: ignore[attr-defined]
except ImportError:
    COMPILED = False
    _batch_iterator, decode_records = iter_batches_python, decode_records_python
else:
    COMPILED = True
    _fastrecords.configure(Record, BatchHeader, CorruptBatchError, _decompress_body)
    _batch_iterator, decode_records = _fastrecords.BatchIterator, _fastrecords.decode_records


def _zigzag(value: int, out: bytearray) -> None:
    encoded = (value << 1) ^ (value >> 63)
    encoded &= 0xFFFFFFFFFFFFFFFF
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)


def _bytes_field(value: bytes | None, out: bytearray) -> None:
    if value is None:
        _zigzag(-1, out)
    else:
        _zigzag(len(value), out)
        out += value


def _encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    body = bytearray(b"\x00")  # attributes
    _zigzag(record.timestamp - base_timestamp, body)
    _zigzag(record.offset - base_offset, body)
    _bytes_field(record.key, body)
    _bytes_field(record.value, body)
    _zigzag(len(record.headers), body)
    for key, value in record.headers:
        _bytes_field(key.encode("utf-8"), body)
        _bytes_field(value, body)
    out = bytearray()
    _zigzag(len(body), out)
    return bytes(out + body)


def build_batch(
    records: Sequence[Record],
    *,
    compression: CompressionType = CompressionType.NONE,
    partition_leader_epoch: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: int | None = None,
) -> bytes:
    """A v2 batch of `records` (offsets and timestamps absolute, ascending offsets)."""
    if not records:
        raise ValueError("a batch needs at least one record")
    base_offset = records[0].offset
    base_timestamp = min(r.timestamp for r in records)
    max_timestamp = max(r.timestamp for r in records)
    attributes = int(compression)
    if log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_BIT
        max_timestamp = log_append_time
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    body = b"".join(_encode_record(r, base_offset, base_timestamp) for r in records)
    payload = compress(compression, body)
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        records[-1].offset - base_offset,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    crc = crc32c.crc32c(after_crc + payload)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    head = struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, MAGIC, crc)
    return head + after_crc + payload


# Control records (transaction markers): key = version i16 (0), type i16
# (ABORT = 0, COMMIT = 1); value = version i16 (0), coordinator epoch i32.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class ControlRecord:
    type: int
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.type == CONTROL_COMMIT


def build_control_batch(
    offset: int,
    timestamp: int,
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A transaction marker batch, as the transaction coordinator has the leader write it."""
    marker = CONTROL_COMMIT if commit else CONTROL_ABORT
    record = Record(
        offset,
        timestamp,
        _CONTROL_KEY.pack(0, marker),
        _CONTROL_VALUE.pack(0, coordinator_epoch),
    )
    return build_batch(
        [record],
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def parse_control_record(record: Record, source: str = "<bytes>") -> ControlRecord:
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise CorruptBatchError(f"{source}: offset {record.offset}: control record without a key")
    version, marker = _CONTROL_KEY.unpack_from(record.key)
    if version != 0 or marker not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise CorruptBatchError(
            f"{source}: offset {record.offset}: "
            f"unknown control record version {version} type {marker}"
        )
    coordinator_epoch = 0
    if record.value is not None and len(record.value) >= _CONTROL_VALUE.size:
        _, coordinator_epoch = _CONTROL_VALUE.unpack_from(record.value)
    return ControlRecord(marker, coordinator_epoch)
