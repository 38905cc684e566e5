"""RemoteFetchService: protobuf in, RemoteFetch calls, protobuf out. Nothing else.

Request checks name the offending field; per-partition failures travel in the
partition's result, failures of the whole call as domain exceptions that the
server's interceptor maps to statuses.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

import grpc

from remotelog.api.fetch.v1 import remote_fetch_pb2 as pb
from remotelog.core.errors import InvalidArgumentError
from remotelog.fetch.batch_file import BatchMessage
from remotelog.fetch.reader import PartitionRead
from remotelog.fetch.service import FetchResult, RemoteFetch
from remotelog.protocol.codecs import FETCH_RESPONSE, READ_OFFSET_RANGE_RESPONSE, Piece
from remotelog.protocol.convert import (
    at_least,
    byte_range_to_proto,
    error_reason_to_proto,
    topic_id_partition_field,
)

_ISOLATION = {
    pb.ISOLATION_LEVEL_UNSPECIFIED: False,
    pb.ISOLATION_LEVEL_READ_UNCOMMITTED: False,
    pb.ISOLATION_LEVEL_READ_COMMITTED: True,
}
# Room left in a message for the fields beside `records`.
FRAMING_BYTES = 64 * 1024


def partition_reads(request: pb.FetchRequest) -> list[PartitionRead]:
    if request.isolation_level not in _ISOLATION:
        raise InvalidArgumentError(
            "isolation_level", f"{request.isolation_level} is not an IsolationLevel"
        )
    at_least(request.max_wait_ms, 0, "max_wait_ms")
    at_least(request.max_bytes, 1, "max_bytes")
    reads, seen = [], set()
    for number, partition in enumerate(request.partitions):
        field = f"partitions[{number}]"
        tip = topic_id_partition_field(partition, field)
        if tip in seen:
            raise InvalidArgumentError(f"{field}.topic_id_partition", f"{tip} is named twice")
        seen.add(tip)
        epoch = None
        if partition.HasField("leader_epoch"):
            epoch = at_least(partition.leader_epoch, 0, f"{field}.leader_epoch")
        reads.append(
            PartitionRead(
                tip,
                at_least(partition.fetch_offset, 0, f"{field}.fetch_offset"),
                at_least(partition.partition_max_bytes, 1, f"{field}.partition_max_bytes"),
                epoch,
                request.min_one_message,
                _ISOLATION[request.isolation_level],
            )
        )
    return reads


def _result(
    message: pb.FetchPartition, result: FetchResult
) -> tuple[pb.FetchPartitionResult, Piece]:
    """One partition's FetchPartitionResult without its records, and the records."""
    answer = pb.FetchPartitionResult(topic_id_partition=message.topic_id_partition)
    if result.error is not None:
        answer.error_reason = error_reason_to_proto(result.error.reason)
        answer.error_message = result.error.message
        return answer, b""
    answer.log_start_offset = result.data.log_start_offset
    answer.aborted_transactions.extend(
        pb.AbortedTransaction(producer_id=pid, first_offset=first)
        for pid, first in result.data.aborted_transactions
    )
    return answer, result.data.records


def encode_fetch_response(
    messages: Sequence[pb.FetchPartition], results: list[FetchResult]
) -> bytes:
    """The FetchResponse's bytes; building it through protobuf would copy every partition's
    records twice (into the message, then out when serialized)."""
    return FETCH_RESPONSE.encode(map(_result, messages, results))


class RemoteFetchServicer:
    """RemoteFetchService; its bulk methods answer with encoded bytes (rpc.bulk_service)."""

    def __init__(self, fetch: RemoteFetch) -> None:
        self.remote_fetch = fetch

    async def Fetch(self, request: pb.FetchRequest, context: grpc.aio.ServicerContext) -> bytes:
        reads = partition_reads(request)
        results = await self.remote_fetch.fetch(
            reads,
            max_wait_ms=request.max_wait_ms,
            max_bytes=request.max_bytes,
            timeout_s=context.time_remaining(),
        )
        return encode_fetch_response(request.partitions, results)

    async def ReadOffsetRange(
        self, request: pb.ReadOffsetRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        tip = topic_id_partition_field(request, "")
        start = at_least(request.start_offset, 0, "start_offset")
        end = None
        if request.HasField("end_offset"):
            end = at_least(request.end_offset, start + 1, "end_offset")
        chunk_bytes = at_least(request.chunk_bytes, 0, "chunk_bytes")
        limit = self.remote_fetch.config.grpc_max_message_bytes - FRAMING_BYTES
        if chunk_bytes > limit:
            raise InvalidArgumentError(
                "chunk_bytes", f"{chunk_bytes} exceeds the {limit} bytes a message can carry"
            )
        reads = self.remote_fetch.read_offset_range(
            tip, start, end, chunk_bytes=chunk_bytes, timeout_s=context.time_remaining()
        )
        async with contextlib.aclosing(reads):
            async for batches in reads:
                if isinstance(batches, BatchMessage):  # read from the file, already encoded
                    yield batches.message
                    continue
                # Encoded without protobuf's copies of the records.
                yield READ_OFFSET_RANGE_RESPONSE.encode_pieces(
                    batches.pieces, batches.size, batches.first_offset, batches.last_offset
                )

    async def LocateOffsetRange(
        self, request: pb.LocateOffsetRangeRequest, context: grpc.aio.ServicerContext
    ) -> pb.LocateOffsetRangeResponse:
        tip = topic_id_partition_field(request, "")
        start = at_least(request.start_offset, 0, "start_offset")
        end = None
        if request.HasField("end_offset"):
            end = at_least(request.end_offset, start + 1, "end_offset")
        located = await self.remote_fetch.locate_offset_range(
            tip,
            start,
            end,
            max_segments=request.max_segments,
            chunks_accepted=request.chunks_accepted,
            timeout_s=context.time_remaining(),
        )
        return pb.LocateOffsetRangeResponse(segments=[byte_range_to_proto(r) for r in located])

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOffsetsResponse:
        tip = topic_id_partition_field(request, "")
        found = await self.remote_fetch.list_offsets(
            tip, request.timestamp, timeout_s=context.time_remaining()
        )
        if found is None:
            return pb.ListOffsetsResponse()
        return pb.ListOffsetsResponse(
            offset=found.offset, timestamp=found.timestamp, leader_epoch=found.leader_epoch
        )
