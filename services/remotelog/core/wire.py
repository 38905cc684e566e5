"""Kafka's message-protocol primitives (flexible versions), big-endian.

Only what the metadata-topic records use: fixed-width integers, unsigned
varints, 16-byte UUIDs, compact strings / nullable bytes / arrays and tagged
fields, as written by Kafka's generated `Writable`/`Readable` code.
"""

from __future__ import annotations

import struct
import uuid

_I8 = struct.Struct(">b")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class WireError(ValueError):
    """Bytes that do not decode; the message names what and where."""


class Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, value: int) -> None:
        self.buf += _I8.pack(value)

    def int32(self, value: int) -> None:
        self.buf += _I32.pack(value)

    def int64(self, value: int) -> None:
        self.buf += _I64.pack(value)

    def bool(self, value: bool) -> None:
        self.buf.append(1 if value else 0)

    def uuid(self, value: uuid.UUID) -> None:
        self.buf += value.bytes

    def uvarint(self, value: int) -> None:
        if value < 0:
            raise ValueError(f"unsigned varint cannot hold {value}")
        while value >= 0x80:
            self.buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self.buf.append(value)

    def compact_string(self, value: str) -> None:
        raw = value.encode("utf-8")
        self.uvarint(len(raw) + 1)
        self.buf += raw

    def compact_nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        self.uvarint(len(value) + 1)
        self.buf += value

    def compact_array_length(self, length: int) -> None:
        self.uvarint(length + 1)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        """Tagged fields in ascending tag order: count, then (tag, size, bytes)."""
        self.uvarint(len(fields))
        for tag, payload in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(payload))
            self.buf += payload


class Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def _take(self, size: int, what: str) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise WireError(
                f"truncated: {what} needs {size} bytes at position {self.pos}, "
                f"{self.remaining} remain"
            )
        view = self.data[self.pos : self.pos + size]
        self.pos += size
        return view

    def int8(self, what: str) -> int:
        return int(_I8.unpack(self._take(1, what))[0])

    def int32(self, what: str) -> int:
        return int(_I32.unpack(self._take(4, what))[0])

    def int64(self, what: str) -> int:
        return int(_I64.unpack(self._take(8, what))[0])

    def bool(self, what: str) -> bool:
        return self._take(1, what)[0] != 0

    def uuid(self, what: str) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16, what)))

    def uvarint(self, what: str) -> int:
        """Kafka's readUnsignedVarint: at most 5 bytes, an unsigned 32-bit value."""
        value = 0
        for shift in range(0, 35, 7):
            byte = self._take(1, what)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if value > 0xFFFFFFFF:
                    break
                return value
        raise WireError(f"{what}: varint longer than 5 bytes at position {self.pos}")

    def compact_string(self, what: str) -> str:
        length = self.uvarint(what) - 1
        if length < 0:
            raise WireError(f"{what}: non-nullable string was serialized as null")
        raw = self._take(length, what)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(f"{what}: string is not valid UTF-8") from None

    def compact_nullable_bytes(self, what: str) -> bytes | None:
        length = self.uvarint(what) - 1
        if length < 0:
            return None
        return bytes(self._take(length, what))

    def compact_array_length(self, what: str) -> int:
        length = self.uvarint(what) - 1
        if length < 0:
            raise WireError(f"{what}: non-nullable array was serialized as null")
        # Each element takes at least one byte: refuse lengths the data cannot hold
        # instead of allocating for them.
        if length > self.remaining:
            raise WireError(f"{what}: array of {length} elements exceeds the remaining bytes")
        return length

    def tagged_fields(self, what: str) -> dict[int, memoryview]:
        """All tagged fields of a struct; callers pick the tags they know."""
        count = self.uvarint(f"{what} tagged field count")
        fields: dict[int, memoryview] = {}
        for _ in range(count):
            tag = self.uvarint(f"{what} tag")
            size = self.uvarint(f"{what} tag {tag} size")
            fields[tag] = self._take(size, f"{what} tag {tag}")
        return fields
