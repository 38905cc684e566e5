"""The bulk messages' codecs write exactly protobuf's bytes and read them back, or leave
it to protobuf."""

from __future__ import annotations

import uuid
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotelog.api.fetch.v1 import remote_fetch_pb2 as fetch_pb
from remotelog.api.segmentstore.v1 import segment_store_pb2 as store_pb
from remotelog.api.type.v1 import segment_pb2 as segment_pb
from remotelog.core.errors import OffsetOutOfRangeError
from remotelog.core.model import TopicIdPartition
from remotelog.fetch.reader import PartitionData
from remotelog.fetch.service import FetchResult
from remotelog.fetch.servicer import encode_fetch_response
from remotelog.protocol.codecs import (
    COPY_CHUNK,
    FETCH_LOG_SEGMENT_RESPONSE,
    FETCH_RESPONSE,
    READ_OFFSET_RANGE_RESPONSE,
    BulkCodec,
    passing_bytes,
)
from remotelog.protocol.convert import error_reason_to_proto, topic_id_partition_to_proto
from remotelog.segmentstore.servicer import DecodedChunk, decode_copy_request

RECORDS = READ_OFFSET_RANGE_RESPONSE
DATA = FETCH_LOG_SEGMENT_RESPONSE
decode_fetch_response = FETCH_RESPONSE.decode
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
EDGES = [0, 1, 127, 128, 16_383, 16_384, 2**31, 2**63 - 1, -1, -(2**63)]


@given(data=st.binary(max_size=300), first=INT64 | st.sampled_from(EDGES), last=INT64)
def test_records_message_is_protobufs_bytes_and_reads_back(
    data: bytes, first: int, last: int
) -> None:
    encoded = RECORDS.encode(data, first, last)
    message = fetch_pb.ReadOffsetRangeResponse(records=data, first_offset=first, last_offset=last)
    assert encoded == message.SerializeToString()
    assert RECORDS.decode(encoded) == (data, (first, last))


@given(
    data=st.binary(max_size=300),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=4),
    last=INT64,
)
def test_records_from_pieces_are_the_same_bytes_as_from_one_buffer(
    data: bytes, cuts: list[int], last: int
) -> None:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    view = memoryview(data)
    pieces = [view[a:b] for a, b in pairwise(points)]
    encoded = RECORDS.encode_pieces(pieces, len(data), 7, last)
    assert encoded == RECORDS.encode(data, 7, last)
    message = fetch_pb.ReadOffsetRangeResponse(records=data, first_offset=7, last_offset=last)
    assert encoded == message.SerializeToString()


@given(data=st.binary(max_size=300), first=INT64, last=INT64)
def test_a_view_reads_the_same_bytes_as_a_copy(data: bytes, first: int, last: int) -> None:
    encoded = RECORDS.encode(data, first, last)
    viewed = RECORDS.decode_view(encoded)
    assert viewed is not None
    view, integers = viewed
    assert (bytes(view), integers) == RECORDS.decode(encoded)
    if data:
        assert isinstance(view, memoryview)
        assert view.obj is encoded  # no copy: a window on the message
        # Field 1 twice is protobuf's to merge, as with decode.
        assert RECORDS.decode_view(encoded + encoded) is None
    else:
        assert view == b""


def test_data_message_at_varint_length_boundaries() -> None:
    for size in (0, 1, 127, 128, 16_383, 16_384, 2_097_152):
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        encoded = DATA.encode(data)
        assert encoded == store_pb.FetchLogSegmentResponse(data=data).SerializeToString()
        assert DATA.decode(encoded) == (data, ())


def test_absent_fields_read_as_protobuf_defaults() -> None:
    assert RECORDS.decode(b"") == (b"", (0, 0))
    only_last = fetch_pb.ReadOffsetRangeResponse(last_offset=7).SerializeToString()
    assert RECORDS.decode(only_last) == (b"", (0, 7))


def test_shapes_it_does_not_own_are_left_to_protobuf() -> None:
    data = store_pb.FetchLogSegmentResponse(data=b"abc").SerializeToString()
    assert DATA.decode(data + b"\x10\x05") is None  # unknown field 2
    assert DATA.decode(data + data) is None  # field 1 twice: protobuf keeps the last
    assert DATA.decode(b"\x0a\x05ab") is None  # length past the end
    assert DATA.decode(b"\x0a") is None  # truncated varint
    assert DATA.decode(b"\x08\x01") is None  # field 1 as a varint
    assert DATA.decode(b"\xff" * 11) is None  # a varint longer than ten bytes
    assert RECORDS.decode(b"\xf8\xff\xff\xff\x0f\x01") is None  # a huge field number


@pytest.mark.parametrize("views", [False, True])
def test_deserializer_falls_back_to_protobuf_for_other_shapes_with_the_same_answer(views):
    deserialize = RECORDS.deserializer(views=views)
    # Fields out of order and split: valid protobuf a different encoder may write.
    reordered = b"\x18\x09\x10\x04" + b"\x0a\x02ab" + b"\x0a\x02cd"
    assert RECORDS.decode(reordered) is None
    fast, slow = deserialize(RECORDS.encode(b"cd", 4, 9)), deserialize(reordered)
    assert (bytes(slow[0]), slow[1]) == (bytes(fast[0]), fast[1]) == (b"cd", (4, 9))
    # The same kinds too: a caller keeping a view (or bytes) gets one either way.
    assert type(slow[0]) is type(fast[0]) is (memoryview if views else bytes)
    # An unknown field (a newer server's) also goes to protobuf: no records is b"".
    newer = RECORDS.encode(b"", 4, 9) + b"\x20\x01"
    assert RECORDS.decode(newer) is None
    assert deserialize(newer) == deserialize(RECORDS.encode(b"", 4, 9)) == (b"", (4, 9))


def _fetch_results() -> tuple[list[fetch_pb.FetchPartition], list[FetchResult]]:
    tips = [TopicIdPartition(uuid.UUID(int=n + 1), f"t{n}", n) for n in range(4)]
    messages = [
        fetch_pb.FetchPartition(topic_id_partition=topic_id_partition_to_proto(t)) for t in tips
    ]
    results = [
        FetchResult(tips[0], PartitionData(b"\x01" * 300, [(7, 100), (9, 0)], 42)),
        FetchResult(tips[1], PartitionData(), OffsetOutOfRangeError("offset 5 is below 10")),
        FetchResult(tips[2], PartitionData(b"", [], 0)),  # the wait expired: no records
        # As the reader hands records: a window on the buffer they were read into.
        FetchResult(tips[3], PartitionData(memoryview(b"\xff" + bytes(range(256)) * 600)[1:])),
    ]
    return messages, results


def test_fetch_response_is_protobufs_bytes_and_reads_back() -> None:
    messages, results = _fetch_results()
    encoded = encode_fetch_response(messages, results)
    expected = fetch_pb.FetchResponse()
    for message, result in zip(messages, results, strict=True):
        out = expected.partitions.add(topic_id_partition=message.topic_id_partition)
        if result.error is not None:
            out.error_reason = error_reason_to_proto(result.error.reason)
            out.error_message = result.error.message
            continue
        out.records = bytes(result.data.records)
        out.log_start_offset = result.data.log_start_offset
        for pid, first in result.data.aborted_transactions:
            out.aborted_transactions.add(producer_id=pid, first_offset=first)
    assert encoded == expected.SerializeToString()
    decoded = decode_fetch_response(encoded)
    assert [records for _, records in decoded] == [p.records for p in expected.partitions]
    for (rest, _), partition in zip(decoded, expected.partitions, strict=True):
        partition.ClearField("records")
        assert rest == partition


def test_fetch_response_in_another_encoders_order_reads_as_protobuf_reads_it() -> None:
    # records first, then written again (the last one wins), then the other fields
    partition = (
        b"\x22\x03abc"
        + b"\x22\x02xy"
        + fetch_pb.FetchPartitionResult(log_start_offset=3, error_message="m").SerializeToString()
    )
    raw = b"\x0a" + bytes([len(partition)]) + partition
    ((rest, records),) = decode_fetch_response(raw)
    reference = fetch_pb.FetchResponse.FromString(raw).partitions[0]
    assert records == reference.records == b"xy"
    assert (rest.log_start_offset, rest.error_message) == (3, "m")
    # an unknown top-level field: protobuf's reading, whole
    assert decode_fetch_response(raw + b"\x10\x01")[0][1] == b"xy"
    assert decode_fetch_response(b"") == []


@given(
    kind=st.sampled_from(list(store_pb.SegmentFile.values())),
    position=st.integers(min_value=0, max_value=2**40) | st.just(0),
    data=st.binary(max_size=200),
)
def test_copy_chunk_is_protobufs_bytes(kind: int, position: int, data: bytes) -> None:
    expected = store_pb.CopyLogSegmentDataRequest(
        chunk=store_pb.SegmentDataChunk(file=kind, position=position, data=data)
    )
    assert COPY_CHUNK.encode(kind, position, data) == expected.SerializeToString()


@given(
    kind=st.integers(min_value=0, max_value=2**31 - 1),
    position=st.integers(min_value=0, max_value=2**40) | st.just(0),
    data=st.binary(max_size=200),
)
def test_copy_chunk_reads_back_as_protobuf_reads_it(kind: int, position: int, data: bytes) -> None:
    raw = COPY_CHUNK.encode(kind, position, data)
    decoded = decode_copy_request(raw)
    assert isinstance(decoded, DecodedChunk)
    reference = store_pb.CopyLogSegmentDataRequest.FromString(raw).chunk
    assert decoded.data.obj is raw  # a view of the received message, not a copy
    assert (decoded.chunk.file, decoded.chunk.position, decoded.data) == (
        reference.file,
        reference.position,
        reference.data,
    )


def test_copy_requests_it_does_not_own_are_left_to_protobuf() -> None:
    metadata = store_pb.CopyLogSegmentDataRequest(
        metadata=segment_pb.RemoteLogSegmentMetadata(segment_size_in_bytes=5)
    )
    one = COPY_CHUNK.encode(store_pb.SEGMENT_FILE_LOG, 0, b"ab")
    unowned = [
        metadata.SerializeToString(),  # the first message: protobuf's
        one + COPY_CHUNK.encode(store_pb.SEGMENT_FILE_LOG, 2, b"cd"),  # two chunks: protobuf merges
        one[:-1],  # cut short
        b"\x12\x03\x1a\x05a",  # the chunk's data runs past its end
        b"",
    ]
    for raw in unowned:
        assert decode_copy_request(raw) is None
    assert decode_copy_request(one) == DecodedChunk(
        store_pb.SegmentDataChunk(file=store_pb.SEGMENT_FILE_LOG), b"ab"
    )


def test_passing_bytes_sends_encoded_messages_as_they_are() -> None:
    serialize = passing_bytes(store_pb.FetchLogSegmentResponse.SerializeToString)
    message = store_pb.FetchLogSegmentResponse(data=b"abc")
    assert serialize(message) == message.SerializeToString()
    assert serialize(b"\x0a\x01z") == b"\x0a\x01z"


def test_a_codec_takes_its_field_numbers_from_the_descriptor() -> None:
    # SegmentDataChunk's data is its third field: the integers go before it on the wire.
    chunk = store_pb.SegmentDataChunk(file=store_pb.SEGMENT_FILE_LOG, position=9, data=b"ab")
    codec = BulkCodec(store_pb.SegmentDataChunk, "data", ("file", "position"))
    encoded = codec.encode(b"ab", store_pb.SEGMENT_FILE_LOG, 9)
    assert encoded == chunk.SerializeToString()
    assert codec.decode(encoded) == (b"ab", (store_pb.SEGMENT_FILE_LOG, 9))


def test_a_codec_refuses_a_message_it_would_not_write_whole() -> None:
    with pytest.raises(TypeError, match="has fields the codec does not write"):
        BulkCodec(fetch_pb.ReadOffsetRangeResponse, "records", ("first_offset",))
    with pytest.raises(TypeError, match="is not a field of the kind the codec writes"):
        BulkCodec(fetch_pb.ReadOffsetRangeResponse, "first_offset")
