"""One codec per bulk message, its field numbers read from the message's descriptor.

A bulk message is one `bytes` field that carries a chunk of a segment (or a
partition's records) and a few integer fields. Each codec writes it with one
copy of the bytes and reads it with one slice (bulk_wire), byte-identical to
protobuf's SerializeToString (the tests check), and answers None to any shape
it does not take, for protobuf to parse: it never misreads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from remotelog.api.fetch.v1 import remote_fetch_pb2 as fetch_pb
from remotelog.api.segmentstore.v1 import segment_store_pb2 as store_pb
from remotelog.protocol import bulk_wire

M = TypeVar("M", bound=Message)
Piece = bytes | memoryview
_VARINT_TYPES = frozenset(
    {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_ENUM}
)


def _field(
    message: type[Message], name: str, types: Iterable[int], *, repeated: bool = False
) -> int:
    field = message.DESCRIPTOR.fields_by_name[name]
    if field.type not in set(types) or field.is_repeated != repeated:
        raise TypeError(
            f"{message.DESCRIPTOR.full_name}.{name} is not a field of the kind the codec writes"
        )
    return int(field.number)


class BulkCodec(Generic[M]):
    """`message` as its bulk `data` field and its integer fields `integers`, in that order
    in encode()'s arguments and decode()'s answer."""

    def __init__(self, message: type[M], data: str, integers: Sequence[str] = ()) -> None:
        self.message = message
        self.data_name, self.integer_names = data, tuple(integers)
        self.data_number = _field(message, data, [FieldDescriptor.TYPE_BYTES])
        self.integer_numbers = tuple(_field(message, name, _VARINT_TYPES) for name in integers)
        numbers = (self.data_number, *self.integer_numbers)
        if len(message.DESCRIPTOR.fields) != len(numbers):
            raise TypeError(f"{message.DESCRIPTOR.full_name} has fields the codec does not write")
        self._integer_index = {number: i for i, number in enumerate(self.integer_numbers)}
        # Protobuf writes fields in number order: None marks the data, i the i-th integer.
        self._order = sorted(
            [
                (self.data_number, None),
                *zip(self.integer_numbers, range(len(integers)), strict=True),
            ]
        )

    def pieces(self, data: Sequence[Piece], size: int, *integers: int) -> list[Piece]:
        """The message's wire pieces, `data` (`size` bytes in all) not copied."""
        parts: list[Piece] = []
        for number, index in self._order:
            if index is None:
                if size:
                    parts += [bulk_wire.varint(number << 3 | 2), bulk_wire.varint(size), *data]
            else:
                parts += bulk_wire.varint_field(number, integers[index])
        return parts

    def encode(self, data: Piece, *integers: int) -> bytes:
        return b"".join(self.pieces((data,), len(data), *integers))

    def encode_pieces(self, data: Sequence[Piece], size: int, *integers: int) -> bytes:
        """As encode(), the data given as consecutive pieces of `size` bytes: one copy."""
        return b"".join(self.pieces(data, size, *integers))

    def decode(self, raw: bytes) -> tuple[bytes, tuple[int, ...]] | None:
        """(the data, the integers) of `raw`; None = let protobuf parse it.

        Absent fields are b"" and 0, as protobuf reads them.
        """
        located = bulk_wire.locate(raw, self.data_number, self._integer_index)
        if located is None:
            return None
        start, end, integers = located
        return raw[start:end], integers

    def decode_view(self, raw: bytes) -> tuple[Piece, tuple[int, ...]] | None:
        """As decode(), the data a view of `raw` rather than a copy (b"" when absent): for a
        reader that copies the bytes on anyway, the slice would be one more copy."""
        located = bulk_wire.locate(raw, self.data_number, self._integer_index)
        if located is None:
            return None
        start, end, integers = located
        return (memoryview(raw)[start:end] if end > start else b""), integers

    def deserializer(
        self, *, views: bool = False
    ) -> Callable[[bytes], tuple[Piece, tuple[int, ...]]]:
        """A response deserializer: the codec's answer, or for any other shape protobuf's
        parse read into the same answer (with `views`, a view of a non-empty data)."""
        decode = self.decode_view if views else self.decode
        parse: Callable[[bytes], M] = self.message.FromString

        def deserialize(raw: bytes) -> tuple[Piece, tuple[int, ...]]:
            decoded = decode(raw)
            if decoded is not None:
                return decoded
            message = parse(raw)
            data: bytes = getattr(message, self.data_name)
            integers = tuple(int(getattr(message, name)) for name in self.integer_names)
            return (memoryview(data) if views and data else data), integers

        return deserialize


def passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A serializer that sends a message a codec already encoded (bytes) as it is."""

    def serializer(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return serializer


FETCH_LOG_SEGMENT_RESPONSE = BulkCodec(store_pb.FetchLogSegmentResponse, "data")
FETCH_INDEX_RESPONSE = BulkCodec(store_pb.FetchIndexResponse, "data")
READ_OFFSET_RANGE_RESPONSE = BulkCodec(
    fetch_pb.ReadOffsetRangeResponse, "records", ("first_offset", "last_offset")
)
SEGMENT_DATA_CHUNK = BulkCodec(store_pb.SegmentDataChunk, "data", ("file", "position"))


class CopyChunkCodec:
    """CopyLogSegmentDataRequest(chunk=SegmentDataChunk(...)), the copy stream's bulk
    message: written from its pieces, read with a view of the chunk's data."""

    chunk_number = _field(
        store_pb.CopyLogSegmentDataRequest, "chunk", [FieldDescriptor.TYPE_MESSAGE]
    )

    def encode(self, kind: int, position: int, data: bytes) -> bytes:
        chunk = SEGMENT_DATA_CHUNK.pieces((data,), len(data), kind, position)
        return b"".join(bulk_wire.message_field(self.chunk_number, chunk))

    def decode(self, raw: bytes) -> tuple[store_pb.SegmentDataChunk, memoryview] | None:
        """(the chunk without its data, a view of the data); None for any other request."""
        split = bulk_wire.split_embedded_bytes_field(
            raw, self.chunk_number, SEGMENT_DATA_CHUNK.data_number
        )
        if split is None:
            return None
        rest, data = split
        try:
            return store_pb.SegmentDataChunk.FromString(rest), data
        except Exception:
            return None


COPY_CHUNK = CopyChunkCodec()


class FetchResponseCodec:
    """FetchResponse with each partition's records placed, not copied, between the small
    rest of its FetchPartitionResult, which protobuf writes and reads."""

    partitions_number = _field(
        fetch_pb.FetchResponse, "partitions", [FieldDescriptor.TYPE_MESSAGE], repeated=True
    )
    records_number = _field(fetch_pb.FetchPartitionResult, "records", [FieldDescriptor.TYPE_BYTES])

    def encode(self, results: Iterable[tuple[fetch_pb.FetchPartitionResult, Piece]]) -> bytes:
        """Each (result without its records, the records) as one FetchPartitionResult.

        The records go where protobuf would put them: after the result's fields
        numbered below them, so the whole is byte-identical to SerializeToString.
        """
        pieces: list[Piece] = []
        for result, records in results:
            rest = result.SerializeToString()
            cut = bulk_wire.fields_below(rest, self.records_number)
            partition = [
                rest[:cut],
                *bulk_wire.bytes_field(self.records_number, records),
                rest[cut:],
            ]
            pieces += bulk_wire.message_field(self.partitions_number, partition)
        return b"".join(pieces)

    def decode(self, raw: bytes) -> list[tuple[fetch_pb.FetchPartitionResult, bytes]]:
        """Each partition's result and its records, the records sliced out once (protobuf
        would copy them twice: parsing, then reading the field). A shape not split here
        is parsed by protobuf whole."""
        ranges = bulk_wire.message_fields(raw, self.partitions_number)
        results = []
        for start, end in ranges or ():
            split = bulk_wire.split_bytes_field(raw, self.records_number, start, end)
            if split is None:
                ranges = None
                break
            rest, records = split
            # Copied out: a result's records are bytes a caller may keep or search.
            results.append((fetch_pb.FetchPartitionResult.FromString(rest), bytes(records)))
        if ranges is None:
            return [(r, r.records) for r in fetch_pb.FetchResponse.FromString(raw).partitions]
        return results


FETCH_RESPONSE = FetchResponseCodec()
