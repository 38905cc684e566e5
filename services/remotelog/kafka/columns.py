"""A fetch's records column by column, as Arrow buffers: what a columnar reader (the
Spark source) builds its arrays from without a Python object per record.

`decode_columns_python` is the reference; `_fastrecords.decode_columns` is it
compiled, with the same checks and messages, and serves as `decode_columns`
when built. tests/kafka/test_columns.py holds them equal. Buffers are in
Arrow's layout and the machine's byte order: int32 offsets into the data of a
variable-size column, validity bitmaps least significant bit first (None when
nothing is null).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from remotelog.kafka import records as records_module
from remotelog.kafka.records import BatchHeader, CorruptBatchError, Record, decode_records_python

_INT64 = range(-(2**63), 2**63)
_INT32_MAX = 2**31 - 1
# Kafka's and Spark's timestampType: 0 CreateTime, 1 LogAppendTime.
_CREATE_TIME, _LOG_APPEND_TIME = struct.pack("=i", 0), struct.pack("=i", 1)


class BinaryColumn(NamedTuple):
    validity: bytes | None
    offsets: bytes  # int32, count + 1
    data: bytes


class HeaderColumn(NamedTuple):
    """list<struct<key string, value binary>> per record; null for a record without."""

    validity: bytes | None
    offsets: bytes  # int32 into keys / values, count + 1
    keys: BinaryColumn  # UTF-8, never null
    values: BinaryColumn


class RecordColumns(NamedTuple):
    rows: int
    offset: bytes  # int64
    timestamp: bytes  # int64 microseconds since the epoch
    timestamp_type: bytes  # int32
    key: BinaryColumn
    value: BinaryColumn
    headers: HeaderColumn | None  # None unless asked for


class _Binary:
    def __init__(self) -> None:
        self.validity = bytearray()
        self.offsets = bytearray(struct.pack("=i", 0))
        self.data = bytearray()
        self.count = self.nulls = 0

    def append(self, value: bytes | None) -> None:
        if self.count % 8 == 0:
            self.validity.append(0)
        if value is None:
            self.nulls += 1
        else:
            self.validity[self.count // 8] |= 1 << (self.count % 8)
            self.data += value
        self.count += 1
        _put_offset(self.offsets, len(self.data))

    def finish(self) -> BinaryColumn:
        validity = bytes(self.validity) if self.nulls else None
        return BinaryColumn(validity, bytes(self.offsets), bytes(self.data))


def _put_offset(offsets: bytearray, end: int) -> None:
    if end > _INT32_MAX:
        raise OverflowError("a column of one fetch passes Arrow's 2 GiB binary limit")
    offsets += struct.pack("=i", end)


class _Columns:
    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.count = 0
        self.offset, self.timestamp, self.timestamp_type = bytearray(), bytearray(), bytearray()
        self.key, self.value = _Binary(), _Binary()
        self.header_validity, self.header_offsets = bytearray(), bytearray(struct.pack("=i", 0))
        self.without_headers = 0
        self.header_key, self.header_value = _Binary(), _Binary()

    def append(self, record: Record, timestamp_us: int, append_time: bool) -> None:
        self.offset += struct.pack("=q", record.offset)
        self.timestamp += struct.pack("=q", timestamp_us)
        self.timestamp_type += _LOG_APPEND_TIME if append_time else _CREATE_TIME
        self.key.append(record.key)
        self.value.append(record.value)
        if self.include_headers:
            if self.count % 8 == 0:
                self.header_validity.append(0)
            if record.headers:
                self.header_validity[self.count // 8] |= 1 << (self.count % 8)
            else:
                self.without_headers += 1
            for name, value in record.headers:
                self.header_key.append(name.encode())
                self.header_value.append(value)
            _put_offset(self.header_offsets, self.header_key.count)
        self.count += 1

    def finish(self) -> RecordColumns:
        headers = None
        if self.include_headers:
            validity = bytes(self.header_validity) if self.without_headers else None
            headers = HeaderColumn(
                validity,
                bytes(self.header_offsets),
                self.header_key.finish(),
                self.header_value.finish(),
            )
        return RecordColumns(
            self.count,
            bytes(self.offset),
            bytes(self.timestamp),
            bytes(self.timestamp_type),
            self.key.finish(),
            self.value.finish(),
            headers,
        )


def decode_columns_python(
    data: bytes | bytearray | memoryview,
    headers: Sequence[BatchHeader],
    start_offset: int,
    end_offset: int | None,
    include_headers: bool,
    source: str,
) -> RecordColumns:
    """The records in [start_offset, end_offset) of the batches `headers` describe in
    `data`, up to the first record at or after `end_offset`."""
    columns = _Columns(include_headers)
    for header in headers:
        batch = decode_records_python(data, header, source=source)
        where = f"{source}: batch at position {header.position}"
        for record in batch:
            if record.offset < start_offset:
                continue
            if end_offset is not None and record.offset >= end_offset:
                return columns.finish()
            if record.offset not in _INT64:
                raise CorruptBatchError(f"{where}: record offset leaves 64 bits")
            timestamp_us = record.timestamp * 1000
            if timestamp_us not in _INT64:
                raise CorruptBatchError(f"{where}: record timestamp leaves 64 bits in microseconds")
            columns.append(record, timestamp_us, header.is_log_append_time)
    return columns.finish()


def _decode_columns_compiled(*args: Any) -> RecordColumns:
    rows, offset, timestamp, types, key, value, headers = _fastrecords.decode_columns(*args)
    return RecordColumns(
        rows,
        offset,
        timestamp,
        types,
        BinaryColumn(*key),
        BinaryColumn(*value),
        None
        if headers is None
        else HeaderColumn(
            headers[0], headers[1], BinaryColumn(*headers[2]), BinaryColumn(*headers[3])
        ),
    )


# (data, headers: a list, start_offset, end_offset, include_headers, source)
decode_columns: Callable[
    [bytes | bytearray | memoryview, list[BatchHeader], int, int | None, bool, str],
    RecordColumns,
]
if records_module.COMPILED:
    from remotelog.kafka import _fastrecords  # type: ignore[attr-defined]

    decode_columns = _decode_columns_compiled
else:
    decode_columns = decode_columns_python
