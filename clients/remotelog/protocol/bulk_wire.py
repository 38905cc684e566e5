"""Bulk-data messages encoded and decoded without protobuf's copies.

The streamed data messages (FetchLogSegmentResponse, FetchIndexResponse,
ReadOffsetRangeResponse) are a `bytes` field 1 and at most a few integers.
Going through protobuf copies each chunk into the message, again when it is
serialized, and twice more on the reading side (parse, then `.data`); for 1 MiB
chunks those copies are most of what a service spends per chunk. Their wire
form is simple: tag, varint length, the bytes, then the integer fields in field
order, so it is written with one copy and read with one slice.

The encoding is byte-identical to protobuf's (proto3: empty bytes and zero
integers are omitted; field order is ascending), which the tests check against
`SerializeToString`. The decoder takes the shapes protobuf writes and, for
anything else (unknown fields, repeated fields, another encoder's choices),
returns None so the caller falls back to protobuf: it never misreads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_MASK64 = (1 << 64) - 1


def _varint(value: int) -> bytes:
    value &= _MASK64  # negative int64 is its two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A serializer that sends already-encoded messages (bytes) as they are."""

    def serializer(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return serializer


def varint_field(number: int, value: int) -> list[bytes]:
    """The pieces of a proto3 integer or enum field (none when zero, as protobuf omits it)."""
    return [_varint(number << 3), _varint(value)] if value else []


def bytes_field(number: int, data: bytes | memoryview) -> list[bytes | memoryview]:
    """The pieces of a proto3 `bytes` field (none when empty, as protobuf omits it)."""
    return [_varint(number << 3 | 2), _varint(len(data)), data] if data else []


def message_field(number: int, pieces: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """The pieces of an embedded message field whose encoding is `pieces`."""
    return [_varint(number << 3 | 2), _varint(sum(map(len, pieces))), *pieces]


def encode(data: bytes | memoryview, *integers: tuple[int, int]) -> bytes:
    """A message with `data` as bytes field 1 and each (field number >= 2, value) as int64."""
    return encode_pieces((data,), len(data), *integers)


def encode_pieces(
    pieces: Sequence[bytes | memoryview], size: int, *integers: tuple[int, int]
) -> bytes:
    """As encode(), bytes field 1 given as consecutive pieces of `size` bytes in all: one copy."""
    parts: list[bytes | memoryview] = [_varint(1 << 3 | 2), _varint(size), *pieces] if size else []
    for number, value in integers:
        parts += varint_field(number, value)
    return b"".join(parts)


def split_bytes_field(
    raw: bytes, number: int, start: int = 0, end: int | None = None
) -> tuple[bytes, memoryview] | None:
    """(the message without field `number`, a view of that field's bytes) of `raw[start:end]`.

    Lets a reader hand the small rest to protobuf and slice the big field out
    itself. The last occurrence wins, as in protobuf. None: not a well-formed
    message (the caller lets protobuf report it).
    """
    rest: list[bytes] = []
    whole = memoryview(raw)
    data = whole[:0]
    position, end = start, len(raw) if end is None else end
    try:
        while position < end:
            begin = position
            key, position = _read_varint(raw, position)
            wire_type = key & 7
            if wire_type == 0:
                _, position = _read_varint(raw, position)
            elif wire_type == 1:
                position += 8
            elif wire_type == 5:
                position += 4
            elif wire_type == 2:
                length, position = _read_varint(raw, position)
                position += length
                if key >> 3 == number:
                    data = whole[position - length : position]
                    continue
            else:
                return None  # groups: not in proto3
            rest.append(raw[begin:position])
    except IndexError:
        return None
    if position != end:
        return None
    return b"".join(rest), data


def split_embedded_bytes_field(
    raw: bytes, number: int, data_number: int
) -> tuple[bytes, memoryview] | None:
    """(that message without field `data_number`, that field's bytes) when `raw` is a
    message holding only one embedded message, field `number`; else None.

    Reads a streamed request whose payload is a message with one bulk `bytes`
    field (a copy's chunk) without copying the bytes, protobuf left the rest.
    """
    fields = message_fields(raw, number)
    if fields is None or len(fields) != 1:
        return None
    start, end = fields[0]
    return split_bytes_field(raw, data_number, start, end)


def message_fields(raw: bytes, number: int) -> list[tuple[int, int]] | None:
    """(start, end) in `raw` of every embedded-message field `number` (a repeated field).

    None unless `raw` is made of that field only.
    """
    found = []
    position, end = 0, len(raw)
    try:
        while position < end:
            key, position = _read_varint(raw, position)
            if key & 7 != 2 or key >> 3 != number:
                return None
            length, position = _read_varint(raw, position)
            if position + length > end:
                return None
            found.append((position, position + length))
            position += length
    except IndexError:
        return None
    return found


def _read_varint(raw: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = raw[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise IndexError("varint longer than ten bytes")


def _locate(raw: bytes, integer_fields: int) -> tuple[int, int, tuple[int, ...]] | None:
    """(start, end) of field 1's bytes in `raw` and the int64 fields 2..integer_fields+1."""
    start = end_of_data = 0
    integers = [0] * integer_fields
    seen = 0
    position, end = 0, len(raw)
    try:
        while position < end:
            key, position = _read_varint(raw, position)
            number, wire_type = key >> 3, key & 7
            if number > integer_fields + 1 or seen >> number & 1:
                return None  # unknown, or repeated: protobuf's merge rules apply
            seen |= 1 << number
            if number == 1 and wire_type == 2:
                length, position = _read_varint(raw, position)
                if position + length > end:
                    return None
                start, end_of_data = position, position + length
                position += length
            elif number >= 2 and wire_type == 0:
                value, position = _read_varint(raw, position)
                integers[number - 2] = value - (1 << 64) if value >> 63 else value
            else:
                return None
    except IndexError:
        return None
    return start, end_of_data, tuple(integers)


def decode(raw: bytes, integer_fields: int = 0) -> tuple[bytes, tuple[int, ...]] | None:
    """(field 1's bytes, int64 fields 2..integer_fields+1) of `raw`; None = use protobuf.

    Absent fields are b"" and 0, as protobuf reads them.
    """
    located = _locate(raw, integer_fields)
    if located is None:
        return None
    start, end, integers = located
    return raw[start:end], integers


def decode_view(
    raw: bytes, integer_fields: int = 0
) -> tuple[bytes | memoryview, tuple[int, ...]] | None:
    """As decode(), field 1 a view of `raw` rather than a copy (b"" when absent).

    For a reader that copies the bytes on anyway (into another message): the
    slice would be one more copy of every byte; the view keeps `raw` alive instead.
    """
    located = _locate(raw, integer_fields)
    if located is None:
        return None
    start, end, integers = located
    return (memoryview(raw)[start:end] if end > start else b""), integers
