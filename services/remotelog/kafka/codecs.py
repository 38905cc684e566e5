"""Kafka's compression codecs, framed exactly as the Java client writes them.

gzip: a gzip member (isal, for speed over zlib). snappy: Kafka's Java producer
writes the xerial-framed stream (magic header, then length-prefixed raw
blocks); librdkafka writes raw snappy; both are read. lz4: the LZ4 frame
format. zstd: a zstd frame.
"""

from __future__ import annotations

import enum
import struct

import cramjam
import lz4.frame
import zstandard
from isal import igzip

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


class CompressionType(enum.IntEnum):
    """Bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CodecError(ValueError):
    """Compressed bytes that do not decompress."""


def compress(codec: CompressionType, data: bytes) -> bytes:
    if codec is CompressionType.NONE:
        return data
    if codec is CompressionType.GZIP:
        return igzip.compress(data)
    if codec is CompressionType.SNAPPY:
        return xerial_snappy_compress(data)
    if codec is CompressionType.LZ4:
        return bytes(lz4.frame.compress(data))
    return bytes(zstandard.ZstdCompressor().compress(data))


def decompress(codec: CompressionType, data: bytes | memoryview) -> bytes:
    try:
        if codec is CompressionType.NONE:
            return bytes(data)
        if codec is CompressionType.GZIP:
            return bytes(igzip.decompress(bytes(data)))  # type: ignore[no-untyped-call]
        if codec is CompressionType.SNAPPY:
            return snappy_decompress(bytes(data))
        if codec is CompressionType.LZ4:
            # lz4 and zstandard read the buffer in place: no copy of the batch.
            return bytes(lz4.frame.decompress(data))
        # Kafka's zstd frames may omit the content size: decompress as a stream.
        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))
    except CodecError:
        raise
    except Exception as exc:
        raise CodecError(f"{codec.name.lower()} data does not decompress: {exc}") from None


def xerial_snappy_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out += struct.pack(">i", len(block))
        out += block
    return bytes(out)


def snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CodecError(f"xerial snappy block length truncated at {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CodecError(f"xerial snappy block of {size} bytes at {pos} passes the end")
        out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + size]))
        pos += size
    return bytes(out)
