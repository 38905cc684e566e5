"""Chunked segment objects: every range reads back exactly, and a chunk that is not
what was written (tampered, moved, another key's) is reported, never returned."""

import os
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remotelog.kafka.records import CompressionType, Record, batches_compressed, build_batch
from remotelog.transforms.chunks import (
    ChunkCodec,
    ChunkIndex,
    CorruptChunkError,
    DataKey,
    SegmentObjectKind,
    decode_range,
    encode_chunks,
)

TOPIC_ID, SEGMENT_ID = uuid.UUID(int=7), uuid.UUID(int=101)
KEY = DataKey(os.urandom(32), "local", "k1", b"wrapped")
TEXT = b"".join(b'{"order": %d, "status": "shipped", "note": "fragile"}\n' % i for i in range(5000))


def codec(level=3, key=KEY, segment_id=SEGMENT_ID, kind=SegmentObjectKind.LOG) -> ChunkCodec:
    return ChunkCodec(TOPIC_ID, segment_id, kind, level, key)


def read(c: ChunkCodec, index: ChunkIndex, stored: list[bytes], first: int, last: int) -> bytes:
    first_chunk, last_chunk = index.chunks_of(first, last)
    wanted = b"".join(stored[first_chunk : last_chunk + 1])
    return b"".join(decode_range(c, index, first_chunk, wanted, first, last))


@settings(max_examples=60, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=3000),
    chunk_size=st.integers(1, 700),
    bounds=st.tuples(st.integers(0, 2999), st.integers(0, 2999)),
    level=st.sampled_from([None, 1]),
    encrypted=st.booleans(),
)
def test_any_range_of_any_object_reads_back_exactly(data, chunk_size, bounds, level, encrypted):
    c = codec(level, KEY if encrypted else None)
    index, stored = encode_chunks(c, data, chunk_size)
    assert index.stored_size == sum(map(len, stored))
    first, last = sorted(b % len(data) for b in bounds)
    assert read(c, index, stored, first, last) == data[first : last + 1]


def test_text_shrinks_and_no_record_is_in_the_clear():
    c = codec()
    index, stored = encode_chunks(c, TEXT, 64 * 1024)
    assert index.stored_size < len(TEXT) / 5
    assert not any(b"shipped" in chunk for chunk in stored)
    assert read(c, index, stored, 0, len(TEXT) - 1) == TEXT


def test_a_chunk_that_does_not_shrink_is_stored_as_it_is():
    noise = os.urandom(10_000)
    index, stored = encode_chunks(codec(key=None), noise, 4096)
    # One flag byte each, nothing else: zstd's larger output was not kept.
    assert list(index.stored_sizes) == [4097, 4097, 1809]
    assert b"".join(s[1:] for s in stored) == noise


@pytest.mark.parametrize(
    "moved",
    [
        lambda stored: [stored[1], stored[0], *stored[2:]],  # two chunks swapped
        lambda stored: [stored[0][:20] + bytes([stored[0][20] ^ 1]) + stored[0][21:], *stored[1:]],
    ],
    ids=["swapped", "tampered"],
)
def test_a_chunk_not_as_written_fails_its_authentication_by_name(moved):
    c = codec()
    index, stored = encode_chunks(c, TEXT, 64 * 1024)
    with pytest.raises(CorruptChunkError) as failed:
        read(c, index, moved(stored), 0, len(TEXT) - 1)
    assert str(failed.value) == (
        f"segment {SEGMENT_ID} log chunk 0: fails its authentication "
        "(tampered, swapped or another key's)"
    )


@pytest.mark.parametrize(
    "reader",
    [
        codec(segment_id=uuid.UUID(int=102)),  # another segment's chunks
        codec(kind=SegmentObjectKind.INDEXES),  # the log's chunks read as the indexes
        codec(key=DataKey(os.urandom(32), "local", "k1", b"w")),  # another data key
    ],
    ids=["segment", "object", "key"],
)
def test_chunks_open_only_in_their_own_segment_object_and_key(reader):
    index, stored = encode_chunks(codec(), TEXT, 64 * 1024)
    with pytest.raises(CorruptChunkError, match="chunk 0: fails its authentication"):
        read(reader, index, stored, 0, 10)


def test_an_index_that_does_not_hold_the_object_is_refused():
    with pytest.raises(ValueError, match="2 chunks do not hold 5000 bytes in chunks of 1000"):
        ChunkIndex(1000, 5000, (10, 10))


def test_a_data_key_never_prints():
    assert KEY.plaintext.hex() not in repr(KEY)
    assert "plaintext" not in repr(KEY)


def record(offset: int) -> Record:
    return Record(offset, 1_700_000_000_000 + offset, None, b"value-%d" % offset, ())


@pytest.mark.parametrize(
    ("codecs", "compressed"),
    [
        ([CompressionType.ZSTD, CompressionType.LZ4], True),
        ([CompressionType.ZSTD, CompressionType.NONE], False),
        ([CompressionType.NONE], False),
    ],
)
def test_batches_compressed_reads_the_attributes_of_the_whole_headers(codecs, compressed):
    log = b"".join(
        build_batch([record(10 * i + j) for j in range(10)], compression=codec_type)
        for i, codec_type in enumerate(codecs)
    )
    assert batches_compressed(log) is compressed
    assert batches_compressed(log + log[:30]) is compressed  # a header cut off is not read
    assert batches_compressed(log[:30]) is False


def test_bytes_that_are_no_batches_are_not_taken_for_compressed_ones():
    assert batches_compressed(b"a record's bytes " * 100) is False


def test_real_uncompressed_segments_are_not_taken_for_compressed(kafka_logs):
    for log in sorted((kafka_logs / "timeindex_test").glob("*.log")):
        assert batches_compressed(log.read_bytes()[: 4 * 1024 * 1024]) is False
