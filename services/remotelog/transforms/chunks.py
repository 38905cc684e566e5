"""A segment object stored as chunks of its original bytes, each compressed, then encrypted.

A stored chunk is `flag || payload` (flag 0: the original bytes, 1: zstd of them),
and with a data key `nonce || AES-256-GCM(flag || payload)`, its associated data
binding the topic id, the segment id, the object and the chunk's number: a chunk
moved to another place, segment or object fails its authentication. The chunk
index (chunk size and every stored chunk's size) maps an original byte to the
stored bytes of its chunk, so a ranged read fetches only the chunks it needs.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from remotelog.core.errors import RemoteStorageError

DATA_KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's 96-bit nonce, random per chunk: 2^32 chunks per key stay safe
TAG_BYTES = 16
# chunk.size's bounds: below, the index and per-chunk overhead outgrow what a ranged
# read saves; above, a 1 MiB fetch decodes too much it does not need.
MIN_CHUNK_SIZE = 64 * 1024
MAX_CHUNK_SIZE = 64 * 1024 * 1024
_RAW, _ZSTD = 0, 1
_AAD_LABEL = b"remotelog-chunk-v1"
_AAD = struct.Struct(">16s16sBI")  # topic id, segment id, object, chunk number


class SegmentObjectKind(Enum):
    """Which of a segment's objects a chunk belongs to (bound into its associated data)."""

    LOG = 1
    INDEXES = 2


class CorruptChunkError(RemoteStorageError):
    """A stored chunk that fails its authentication or decoding: reported, never served."""


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """Where each chunk of an object's original bytes lies in the stored object."""

    chunk_size: int
    original_size: int
    stored_sizes: tuple[int, ...]
    _stored_starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise ValueError("chunk_size must be positive")
        if len(self.stored_sizes) != -(-self.original_size // self.chunk_size):
            raise ValueError(
                f"{len(self.stored_sizes)} chunks do not hold {self.original_size} bytes "
                f"in chunks of {self.chunk_size}"
            )
        starts, position = [], 0
        for size in self.stored_sizes:
            starts.append(position)
            position += size
        object.__setattr__(self, "_stored_starts", tuple(starts))

    @property
    def stored_size(self) -> int:
        return sum(self.stored_sizes)

    def original_size_of(self, number: int) -> int:
        return min(self.chunk_size, self.original_size - number * self.chunk_size)

    def stored_range(self, first_chunk: int, last_chunk: int) -> tuple[int, int]:
        """Stored bytes (first, last inclusive) of chunks `first_chunk`..`last_chunk`."""
        start = self._stored_starts[first_chunk]
        end = self._stored_starts[last_chunk] + self.stored_sizes[last_chunk] - 1
        return start, end

    def chunks_of(self, first: int, last: int) -> tuple[int, int]:
        """The chunks holding original bytes `first`..`last` (inclusive)."""
        if not 0 <= first <= last < self.original_size:
            raise ValueError(f"bytes {first}..{last} are not in 0..{self.original_size - 1}")
        return first // self.chunk_size, last // self.chunk_size

    def within(self, number: int, first: int, last: int) -> slice:
        """The part of chunk `number`'s original bytes that lies in `first`..`last`."""
        chunk_start = number * self.chunk_size
        high = min(last - chunk_start, self.original_size_of(number) - 1)
        return slice(max(first - chunk_start, 0), high + 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "chunk_size": self.chunk_size,
            "size": self.original_size,
            "stored_sizes": list(self.stored_sizes),
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ChunkIndex:
        sizes = document["stored_sizes"]
        if not isinstance(sizes, list) or not all(type(s) is int and s > 0 for s in sizes):
            raise ValueError("stored_sizes must be a list of positive integers")
        return cls(int(document["chunk_size"]), int(document["size"]), tuple(sizes))


@dataclass(frozen=True, slots=True)
class DataKey:
    """A segment's data key: its plaintext, never printed, and how it is kept wrapped."""

    plaintext: bytes = field(repr=False)
    key_provider: str
    key_id: str
    wrapped: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.plaintext) != DATA_KEY_BYTES:
            raise ValueError(f"a data key has {DATA_KEY_BYTES} bytes, not {len(self.plaintext)}")


@dataclass(frozen=True, slots=True)
class ChunkCodec:
    """Encodes and decodes the chunks of one object of one segment."""

    topic_id: uuid.UUID
    segment_id: uuid.UUID
    kind: SegmentObjectKind
    compression_level: int | None  # None: never compress
    data_key: DataKey | None

    def _aad(self, number: int) -> bytes:
        return _AAD_LABEL + _AAD.pack(
            self.topic_id.bytes, self.segment_id.bytes, self.kind.value, number
        )

    def encode(self, number: int, original: bytes | memoryview) -> bytes:
        """The stored form of chunk `number`: compressed where that shrinks it."""
        flag, payload = _RAW, bytes(original)
        if self.compression_level is not None:
            compressed = zstandard.ZstdCompressor(level=self.compression_level).compress(payload)
            if len(compressed) < len(payload):
                flag, payload = _ZSTD, compressed
        plain = bytes((flag,)) + payload
        if self.data_key is None:
            return plain
        nonce = os.urandom(NONCE_BYTES)
        return nonce + AESGCM(self.data_key.plaintext).encrypt(nonce, plain, self._aad(number))

    def decode(self, number: int, stored: bytes | memoryview, original_size: int) -> bytes:
        """Chunk `number`'s original bytes; CorruptChunkError for anything else."""
        what = f"segment {self.segment_id} {self.kind.name.lower()} chunk {number}"
        stored = bytes(stored)
        if self.data_key is not None:
            if len(stored) < NONCE_BYTES + TAG_BYTES + 1:
                raise CorruptChunkError(f"{what}: {len(stored)} bytes, too short for its nonce")
            aead = AESGCM(self.data_key.plaintext)
            try:
                stored = aead.decrypt(stored[:NONCE_BYTES], stored[NONCE_BYTES:], self._aad(number))
            except InvalidTag:
                raise CorruptChunkError(
                    f"{what}: fails its authentication (tampered, swapped or another key's)"
                ) from None
        if not stored:
            raise CorruptChunkError(f"{what}: empty")
        flag, payload = stored[0], stored[1:]
        if flag == _ZSTD:
            try:
                payload = zstandard.ZstdDecompressor().decompress(
                    payload, max_output_size=original_size
                )
            except zstandard.ZstdError as exc:
                raise CorruptChunkError(f"{what}: zstd: {exc}") from None
        elif flag != _RAW:
            raise CorruptChunkError(f"{what}: unknown chunk flag {flag}")
        if len(payload) != original_size:
            raise CorruptChunkError(
                f"{what}: {len(payload)} bytes where the index says {original_size}"
            )
        return payload


def encode_chunks(
    codec: ChunkCodec, original: bytes | memoryview, chunk_size: int
) -> tuple[ChunkIndex, list[bytes]]:
    """A whole object's stored chunks and their index."""
    view = memoryview(original)
    stored = [
        codec.encode(number, view[start : start + chunk_size])
        for number, start in enumerate(range(0, len(view), chunk_size))
    ]
    return ChunkIndex(chunk_size, len(view), tuple(len(s) for s in stored)), stored


def decode_range(
    codec: ChunkCodec,
    index: ChunkIndex,
    first_chunk: int,
    stored: bytes | memoryview,
    first: int,
    last: int,
) -> Iterator[bytes]:
    """Original bytes `first`..`last` from `stored`: whole stored chunks from
    `first_chunk` on, each decoded whole and cut to the range."""
    view = memoryview(stored)
    position, number = 0, first_chunk
    while position < len(view):
        size = index.stored_sizes[number]
        if position + size > len(view):
            raise CorruptChunkError(
                f"segment {codec.segment_id} {codec.kind.name.lower()} chunk {number}: "
                f"{len(view) - position} of its {size} stored bytes"
            )
        original = codec.decode(
            number, view[position : position + size], index.original_size_of(number)
        )
        part = index.within(number, first, last)
        if part.start < part.stop:
            yield original[part]
        position += size
        number += 1
