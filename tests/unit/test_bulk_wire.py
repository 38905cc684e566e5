"""bulk_wire writes exactly protobuf's bytes and reads them back, or declines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from remotelog.api.fetch.v1 import remote_fetch_pb2 as fetch_pb
from remotelog.api.segmentstore.v1 import segment_store_pb2 as store_pb
from remotelog.client.base import bulk_deserializer
from remotelog.core import bulk_wire

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
EDGES = [0, 1, 127, 128, 16_383, 16_384, 2**31, 2**63 - 1, -1, -(2**63)]


def _records(m: fetch_pb.ReadOffsetRangeResponse) -> tuple[bytes, tuple[int, ...]]:
    return m.records, (m.first_offset, m.last_offset)


@given(data=st.binary(max_size=300), first=INT64 | st.sampled_from(EDGES), last=INT64)
def test_records_message_is_protobufs_bytes_and_reads_back(
    data: bytes, first: int, last: int
) -> None:
    encoded = bulk_wire.encode(data, (2, first), (3, last))
    message = fetch_pb.ReadOffsetRangeResponse(records=data, first_offset=first, last_offset=last)
    assert encoded == message.SerializeToString()
    assert bulk_wire.decode(encoded, 2) == (data, (first, last))


def test_data_message_at_varint_length_boundaries() -> None:
    for size in (0, 1, 127, 128, 16_383, 16_384, 2_097_152):
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        encoded = bulk_wire.encode(data)
        assert encoded == store_pb.FetchLogSegmentResponse(data=data).SerializeToString()
        assert bulk_wire.decode(encoded) == (data, ())


def test_absent_fields_read_as_protobuf_defaults() -> None:
    assert bulk_wire.decode(b"", 2) == (b"", (0, 0))
    only_last = fetch_pb.ReadOffsetRangeResponse(last_offset=7).SerializeToString()
    assert bulk_wire.decode(only_last, 2) == (b"", (0, 7))


def test_shapes_it_does_not_own_are_left_to_protobuf() -> None:
    data = store_pb.FetchLogSegmentResponse(data=b"abc").SerializeToString()
    assert bulk_wire.decode(data + b"\x10\x05") is None  # unknown field 2
    assert bulk_wire.decode(data + data) is None  # field 1 twice: protobuf keeps the last
    assert bulk_wire.decode(b"\x0a\x05ab") is None  # length past the end
    assert bulk_wire.decode(b"\x0a") is None  # truncated varint
    assert bulk_wire.decode(b"\x08\x01") is None  # field 1 as a varint
    assert bulk_wire.decode(b"\xff" * 11) is None  # a varint longer than ten bytes
    assert bulk_wire.decode(b"\xf8\xff\xff\xff\x0f\x01", 2) is None  # a huge field number


def test_deserializer_falls_back_to_protobuf_for_other_shapes() -> None:
    deserialize = bulk_deserializer(fetch_pb.ReadOffsetRangeResponse, 2, _records)
    # Fields out of order and split: valid protobuf a different encoder may write.
    reordered = b"\x18\x09\x10\x04" + b"\x0a\x02ab" + b"\x0a\x02cd"
    assert bulk_wire.decode(reordered, 2) is None
    assert deserialize(reordered) == (b"cd", (4, 9))
    assert deserialize(bulk_wire.encode(b"xy", (2, 4), (3, 9))) == (b"xy", (4, 9))
