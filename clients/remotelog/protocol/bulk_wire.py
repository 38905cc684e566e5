"""The protobuf wire format's pieces, for the bulk messages' codecs (codecs.py).

The streamed data messages are a `bytes` field and at most a few integers.
Going through protobuf copies each chunk into the message, again when it is
serialized, and twice more on the reading side (parse, then `.data`); for 1 MiB
chunks those copies are most of what a service spends per chunk. Their wire
form is simple: tag, varint length, the bytes, the integer fields, all in field
order, so it is written with one copy and read with one slice.

What is written here is byte-identical to protobuf's (proto3: empty bytes and
zero integers are omitted; field order is ascending). The readers take the
shapes protobuf writes and, for anything else (unknown fields, repeated
fields, another encoder's choices), return None so the caller falls back to
protobuf: they never misread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_MASK64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    value &= _MASK64  # negative int64 is its two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_field(number: int, value: int) -> list[bytes]:
    """The pieces of a proto3 integer or enum field (none when zero, as protobuf omits it)."""
    return [varint(number << 3), varint(value)] if value else []


def bytes_field(number: int, data: bytes | memoryview) -> list[bytes | memoryview]:
    """The pieces of a proto3 `bytes` field (none when empty, as protobuf omits it)."""
    return [varint(number << 3 | 2), varint(len(data)), data] if data else []


def message_field(number: int, pieces: Sequence[bytes | memoryview]) -> list[bytes | memoryview]:
    """The pieces of an embedded message field whose encoding is `pieces`."""
    return [varint(number << 3 | 2), varint(sum(map(len, pieces))), *pieces]


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
            if key & 7 == 2 and key >> 3 == number:
                length, position = _read_varint(raw, position)
                position += length
                data = whole[position - length : position]
                continue
            position = _skip_value(raw, position, key & 7)
            rest.append(raw[begin:position])
    except IndexError:
        return None
    if position != end:
        return None
    return b"".join(rest), data


def _skip_value(raw: bytes, position: int, wire_type: int) -> int:
    """Where the value of a field of `wire_type` that starts at `position` ends."""
    if wire_type == 0:
        return _read_varint(raw, position)[1]
    if wire_type == 1:
        return position + 8
    if wire_type == 5:
        return position + 4
    if wire_type == 2:
        length, position = _read_varint(raw, position)
        return position + length
    raise IndexError("groups: not in proto3")


def fields_below(raw: bytes, number: int) -> int:
    """How many leading bytes of `raw`, a message as protobuf writes it (fields in number
    order), hold its fields numbered below `number`: where a field `number` goes."""
    position = 0
    while position < len(raw):
        key, after = _read_varint(raw, position)
        if key >> 3 >= number:
            return position
        position = _skip_value(raw, after, key & 7)
    return position


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


def locate(
    raw: bytes, data_number: int, integer_index: Mapping[int, int]
) -> tuple[int, int, tuple[int, ...]] | None:
    """(start, end) of the `bytes` field `data_number` in `raw` and the values of the int64
    fields, placed by `integer_index` (field number -> position); None for any other shape."""
    start = end_of_data = 0
    integers = [0] * len(integer_index)
    seen = 0  # bit 0: the data; bit i + 1: the i-th integer
    position, end = 0, len(raw)
    try:
        while position < end:
            key, position = _read_varint(raw, position)
            number, wire_type = key >> 3, key & 7
            if number == data_number and wire_type == 2:
                bit = 0
            elif number in integer_index and wire_type == 0:
                bit = integer_index[number] + 1
            else:
                return None  # unknown, or not of its type
            if seen >> bit & 1:
                return None  # repeated: protobuf's merge rules apply
            seen |= 1 << bit
            if bit == 0:
                length, position = _read_varint(raw, position)
                if position + length > end:
                    return None
                start, end_of_data = position, position + length
                position += length
            else:
                value, position = _read_varint(raw, position)
                integers[bit - 1] = value - (1 << 64) if value >> 63 else value
    except IndexError:
        return None
    return start, end_of_data, tuple(integers)
