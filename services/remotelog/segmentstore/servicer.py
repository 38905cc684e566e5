"""SegmentStoreService: protobuf in, SegmentStore calls, protobuf out. Nothing else.

A copy's chunks are the exception on the way in: sliced from their bytes
(decode_copy_request), not parsed by protobuf.

Errors are domain exceptions; the server's interceptor maps them to statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import grpc

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.core.deadline import deadline_after, stream_within
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import IndexType, SegmentFile
from remotelog.protocol.codecs import COPY_CHUNK, FETCH_INDEX_RESPONSE, FETCH_LOG_SEGMENT_RESPONSE
from remotelog.protocol.convert import (
    index_type_from_proto,
    segment_file_from_proto,
    segment_file_to_proto,
    segment_metadata_from_proto,
    segment_metadata_to_proto,
)
from remotelog.segmentstore.backend import Chunk
from remotelog.segmentstore.direct_copy import (
    DirectCopies,
    LocalFile,
    SentPart,
    UploadedChunks,
    sizes_of,
)
from remotelog.segmentstore.layout import WrappedDataKey
from remotelog.segmentstore.store import SegmentChunk, SegmentStore


@dataclass(frozen=True, slots=True)
class DecodedChunk:
    """A CopyLogSegmentData chunk message as decode_copy_request reads it."""

    chunk: pb.SegmentDataChunk  # file and position; its data is `data`
    data: memoryview  # of the received message: the backend copies what it keeps


def decode_copy_request(raw: bytes) -> DecodedChunk | None:
    """A chunk request with a view of its data; None for the rest (protobuf reads them).

    protobuf copies a chunk's data when it parses the message and again for
    `.data`; a view copies nothing.
    """
    decoded = COPY_CHUNK.decode(raw)
    return None if decoded is None else DecodedChunk(*decoded)


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


def _sizes(files: Iterable[pb.SegmentFileSize]) -> dict[SegmentFile, int]:
    return sizes_of(
        ((segment_file_from_proto(f.file, "files.file"), f.size) for f in files), "files"
    )


def _parts(parts: Iterable[pb.UploadedPart]) -> list[SentPart]:
    return [SentPart(p.part_number, p.size, p.md5) for p in parts]


def _chunks(
    request: pb.StartSegmentUploadRequest | pb.CompleteSegmentUploadRequest,
) -> UploadedChunks | None:
    if not request.HasField("chunks"):
        return None
    chunks = request.chunks
    wrapped = None
    if chunks.HasField("wrapped_data_key"):
        key = chunks.wrapped_data_key
        if not key.key_provider or not key.key_id or not key.wrapped:
            raise InvalidArgumentError(
                "chunks.wrapped_data_key", "needs its key_provider, key_id and wrapped key"
            )
        wrapped = WrappedDataKey(key.key_provider, key.key_id, key.wrapped)
    return UploadedChunks(
        chunks.chunk_size,
        tuple(chunks.log_stored_sizes),
        tuple(chunks.indexes_stored_sizes),
        chunks.compressed,
        wrapped,
    )


class SegmentStoreServicer:
    """SegmentStoreService; its bulk methods answer with encoded bytes (rpc.bulk_service)."""

    def __init__(
        self, store: SegmentStore, direct: DirectCopies, *, copy_chunk_max_bytes: int
    ) -> None:
        self.store = store
        self.direct = direct
        self.copy_chunk_max_bytes = copy_chunk_max_bytes

    async def CopyLogSegmentData(
        self,
        request_iterator: AsyncIterator[pb.CopyLogSegmentDataRequest | DecodedChunk],
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
        requests: AsyncIterator[pb.CopyLogSegmentDataRequest | DecodedChunk],
        context: grpc.aio.ServicerContext,
    ) -> pb.CopyLogSegmentDataResponse:
        first = await anext(requests, None)
        if (
            not isinstance(first, pb.CopyLogSegmentDataRequest)
            or first.WhichOneof("payload") != "metadata"
        ):
            raise InvalidArgumentError("metadata", "the first message must carry the metadata")
        metadata = segment_metadata_from_proto(first.metadata, "metadata")

        async def chunks() -> AsyncIterator[SegmentChunk]:
            async for request in requests:
                data: Chunk
                if isinstance(request, DecodedChunk):
                    chunk, data = request.chunk, request.data
                elif request.WhichOneof("payload") == "chunk":
                    chunk, data = request.chunk, request.chunk.data
                else:
                    raise InvalidArgumentError("chunk", "every message after the first is a chunk")
                file = segment_file_from_proto(chunk.file, "chunk.file")
                if len(data) > self.copy_chunk_max_bytes:
                    raise InvalidArgumentError(
                        "chunk.data",
                        f"{len(data)} bytes exceed copy.chunk.max.bytes "
                        f"{self.copy_chunk_max_bytes}",
                    )
                yield SegmentChunk(file, chunk.position, data)

        with deadline_after(context.time_remaining()):
            custom = await self.store.copy_log_segment_data(metadata, chunks())
        return pb.CopyLogSegmentDataResponse(custom_metadata=custom)

    async def CopyLogSegmentFiles(
        self, request: pb.CopyLogSegmentFilesRequest, context: grpc.aio.ServicerContext
    ) -> pb.CopyLogSegmentFilesResponse:
        metadata = segment_metadata_from_proto(request.metadata, "metadata")
        files = sizes_of(
            (
                (segment_file_from_proto(f.file, "files.file"), LocalFile(f.path, f.size))
                for f in request.files
            ),
            "files",
        )
        inline = sizes_of(
            (
                (segment_file_from_proto(c.file, "inline_files.file"), c)
                for c in request.inline_files
            ),
            "inline_files",
        )
        with deadline_after(context.time_remaining()):
            custom = await self.direct.copy_files(
                metadata, files, {file: chunk.data for file, chunk in inline.items()}
            )
        return pb.CopyLogSegmentFilesResponse(custom_metadata=custom)

    async def PrepareSegmentUpload(
        self, request: pb.PrepareSegmentUploadRequest, context: grpc.aio.ServicerContext
    ) -> pb.PrepareSegmentUploadResponse:
        metadata = segment_metadata_from_proto(request.metadata, "metadata")
        with deadline_after(context.time_remaining()):
            transforms = await self.direct.prepare_upload(metadata)
        if transforms is None:
            return pb.PrepareSegmentUploadResponse()
        key = transforms.data_key
        return pb.PrepareSegmentUploadResponse(
            transforms=pb.UploadTransforms(
                chunk_size=transforms.chunk_size,
                compression_enabled=transforms.compression_level is not None,
                zstd_level=transforms.compression_level or 0,
                compression_heuristic_enabled=transforms.compression_heuristic,
                data_key=b"" if key is None else key.plaintext,
                wrapped_data_key=None
                if key is None
                else pb.WrappedDataKey(
                    key_provider=key.key_provider, key_id=key.key_id, wrapped=key.wrapped
                ),
            )
        )

    async def StartSegmentUpload(
        self, request: pb.StartSegmentUploadRequest, context: grpc.aio.ServicerContext
    ) -> pb.StartSegmentUploadResponse:
        metadata = segment_metadata_from_proto(request.metadata, "metadata")
        with deadline_after(context.time_remaining()):
            upload = await self.direct.start_upload(
                metadata,
                _sizes(request.files),
                request.copy_timeout_ms / 1000,
                _parts(request.log_parts),
                request.indexes_md5,
                _chunks(request),
            )
        return pb.StartSegmentUploadResponse(
            upload_id=upload.upload_id,
            log_parts=[
                pb.UploadPart(part_number=p.number, position=p.position, size=p.size, url=p.url)
                for p in upload.log_parts
            ],
            indexes_url=upload.indexes_url,
            index_order=[segment_file_to_proto(f) for f in upload.index_order],
            valid_for_ms=upload.valid_for_s * 1000,
            indexes_headers=upload.indexes_headers,
        )

    async def CompleteSegmentUpload(
        self, request: pb.CompleteSegmentUploadRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteSegmentUploadResponse:
        metadata = segment_metadata_from_proto(request.metadata, "metadata")
        with deadline_after(context.time_remaining()):
            custom = await self.direct.complete_upload(
                metadata,
                request.upload_id,
                _sizes(request.files),
                _parts(request.log_parts),
                _chunks(request),
            )
        return pb.CompleteSegmentUploadResponse(custom_metadata=custom)

    async def AbortSegmentUpload(
        self, request: pb.AbortSegmentUploadRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortSegmentUploadResponse:
        metadata = segment_metadata_from_proto(request.metadata, "metadata")
        with deadline_after(context.time_remaining()):
            await self.direct.abort_upload(metadata, request.upload_id)
        return pb.AbortSegmentUploadResponse()

    async def FetchLogSegment(
        self, request: pb.FetchLogSegmentRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        end = request.end_position if request.HasField("end_position") else None
        chunks = stream_within(
            context.time_remaining(),
            self.store.fetch_log_segment(metadata, request.start_position, end),
        )
        async with contextlib.aclosing(chunks):
            async for data in chunks:
                yield FETCH_LOG_SEGMENT_RESPONSE.encode(data)

    async def FetchIndex(
        self, request: pb.FetchIndexRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        index = index_type_from_proto(request.index_type).segment_file
        chunks = stream_within(context.time_remaining(), self.store.fetch_index(metadata, index))
        async with contextlib.aclosing(chunks):
            async for data in chunks:
                yield FETCH_INDEX_RESPONSE.encode(data)

    async def DescribeLogSegment(
        self, request: pb.DescribeLogSegmentRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeLogSegmentResponse:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        manifest, custom = await self.store.describe_log_segment(metadata)
        return pb.DescribeLogSegmentResponse(
            remote_log_segment_metadata=segment_metadata_to_proto(manifest.metadata),
            custom_metadata=custom or b"",
        )

    async def GetLogSegmentUrl(
        self, request: pb.GetLogSegmentUrlRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetLogSegmentUrlResponse:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        urls = await self.store.log_segment_url(metadata, request.chunks_accepted)
        chunks = None
        if urls.chunks is not None:
            chunks = pb.SegmentChunks(
                chunk_size=urls.chunks.log.chunk_size,
                log_stored_sizes=urls.chunks.log.stored_sizes,
                indexes_size=urls.chunks.indexes.original_size,
                indexes_stored_sizes=urls.chunks.indexes.stored_sizes,
                data_key=urls.chunks.data_key or b"",
            )
        return pb.GetLogSegmentUrlResponse(
            url=urls.log,
            valid_for_ms=urls.valid_for_s * 1000,
            indexes_url=urls.indexes,
            index_ranges=[
                pb.IndexRange(
                    index_type=IndexType.of_file(file).value,  # type: ignore[arg-type]
                    position=where.position,
                    size=where.size,
                )
                for file, where in urls.index_ranges.items()
            ],
            chunks=chunks,
        )

    async def DeleteLogSegmentData(
        self, request: pb.DeleteLogSegmentDataRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteLogSegmentDataResponse:
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        with deadline_after(context.time_remaining()):
            await self.store.delete_log_segment_data(metadata)
        return pb.DeleteLogSegmentDataResponse()
