"""SegmentStoreService: protobuf in, SegmentStore calls, protobuf out. Nothing else.

Errors are domain exceptions; the server's interceptor maps them to statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.core import bulk_wire
from remotelog.core.convert import segment_metadata_from_proto
from remotelog.core.deadline import deadline_after, stream_within
from remotelog.core.errors import InvalidArgumentError
from remotelog.segmentstore.layout import SegmentFile
from remotelog.segmentstore.store import SegmentChunk, SegmentStore

_FILES = {
    pb.SEGMENT_FILE_LOG: SegmentFile.LOG,
    pb.SEGMENT_FILE_OFFSET_INDEX: SegmentFile.OFFSET_INDEX,
    pb.SEGMENT_FILE_TIME_INDEX: SegmentFile.TIME_INDEX,
    pb.SEGMENT_FILE_TRANSACTION_INDEX: SegmentFile.TRANSACTION_INDEX,
    pb.SEGMENT_FILE_PRODUCER_SNAPSHOT: SegmentFile.PRODUCER_SNAPSHOT,
    pb.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT: SegmentFile.LEADER_EPOCH_CHECKPOINT,
}
_INDEXES = {
    pb.INDEX_TYPE_OFFSET: SegmentFile.OFFSET_INDEX,
    pb.INDEX_TYPE_TIMESTAMP: SegmentFile.TIME_INDEX,
    pb.INDEX_TYPE_TRANSACTION: SegmentFile.TRANSACTION_INDEX,
    pb.INDEX_TYPE_PRODUCER_SNAPSHOT: SegmentFile.PRODUCER_SNAPSHOT,
    pb.INDEX_TYPE_LEADER_EPOCH: SegmentFile.LEADER_EPOCH_CHECKPOINT,
}


# How long a failed copy keeps reading what the client still sends. grpc-python's
# asyncio client replaces the server's status with INTERNAL "Internal error from
# Core" when a write fails after the server ended the call (grpc/grpc#36066), so a
# copy refused early would reach the broker as INTERNAL instead of
# INVALID_ARGUMENT or UNAVAILABLE, and its retry decision would be wrong. Reading
# to the client's half-close first delivers the real status; the bound keeps a
# client that never stops from holding the call.
_DRAIN_AFTER_FAILURE_S = 30.0


async def _drain(requests: AsyncIterator[object], within_s: float) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(within_s):
            async for _ in requests:
                continue


class SegmentStoreServicer(pb_grpc.SegmentStoreServiceServicer):
    def __init__(self, store: SegmentStore, *, copy_chunk_max_bytes: int) -> None:
        self.store = store
        self.copy_chunk_max_bytes = copy_chunk_max_bytes

    async def CopyLogSegmentData(
        self,
        request_iterator: AsyncIterator[pb.CopyLogSegmentDataRequest],
        context: grpc.aio.ServicerContext,
    ) -> pb.CopyLogSegmentDataResponse:
        requests = aiter(request_iterator)
        try:
            return await self._copy(requests, context)
        except Exception:
            remaining = context.time_remaining()
            within_s = _DRAIN_AFTER_FAILURE_S if remaining is None else remaining
            await _drain(requests, min(_DRAIN_AFTER_FAILURE_S, within_s))
            raise

    async def _copy(
        self,
        requests: AsyncIterator[pb.CopyLogSegmentDataRequest],
        context: grpc.aio.ServicerContext,
    ) -> pb.CopyLogSegmentDataResponse:
        first = await anext(requests, None)
        if first is None or first.WhichOneof("payload") != "metadata":
            raise InvalidArgumentError("metadata", "the first message must carry the metadata")
        metadata = segment_metadata_from_proto(first.metadata, "metadata")

        async def chunks() -> AsyncIterator[SegmentChunk]:
            async for request in requests:
                if request.WhichOneof("payload") != "chunk":
                    raise InvalidArgumentError("chunk", "every message after the first is a chunk")
                chunk = request.chunk
                file = _FILES.get(chunk.file)
                if file is None:
                    raise InvalidArgumentError("chunk.file", f"unknown segment file {chunk.file}")
                if len(chunk.data) > self.copy_chunk_max_bytes:
                    raise InvalidArgumentError(
                        "chunk.data",
                        f"{len(chunk.data)} bytes exceed copy.chunk.max.bytes "
                        f"{self.copy_chunk_max_bytes}",
                    )
                yield SegmentChunk(file, chunk.position, chunk.data)

        with deadline_after(context.time_remaining()):
            custom = await self.store.copy_log_segment_data(metadata, chunks())
        return pb.CopyLogSegmentDataResponse(custom_metadata=custom)

    async def FetchLogSegment(
        self, request: pb.FetchLogSegmentRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FetchLogSegmentResponse]:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        end = request.end_position if request.HasField("end_position") else None
        chunks = stream_within(
            context.time_remaining(),
            self.store.fetch_log_segment(metadata, request.start_position, end),
        )
        async with contextlib.aclosing(chunks):
            async for data in chunks:
                yield bulk_wire.encode(data)  # type: ignore[misc]

    async def FetchIndex(
        self, request: pb.FetchIndexRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.FetchIndexResponse]:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        index = _INDEXES.get(request.index_type)
        if index is None:
            raise InvalidArgumentError("index_type", f"unknown index type {request.index_type}")
        chunks = stream_within(context.time_remaining(), self.store.fetch_index(metadata, index))
        async with contextlib.aclosing(chunks):
            async for data in chunks:
                yield bulk_wire.encode(data)  # type: ignore[misc]

    async def DeleteLogSegmentData(
        self, request: pb.DeleteLogSegmentDataRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteLogSegmentDataResponse:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        with deadline_after(context.time_remaining()):
            await self.store.delete_log_segment_data(metadata)
        return pb.DeleteLogSegmentDataResponse()
