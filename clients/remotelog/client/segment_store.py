"""SegmentStoreClient: what a broker (or the copy scheduler) calls as its RemoteStorageManager."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.client.base import ServiceClient, bulk_method, bulk_stream
from remotelog.core import bulk_wire
from remotelog.core.convert import segment_metadata_to_proto
from remotelog.core.model import RemoteLogSegmentMetadata

IndexType = pb.IndexType
DEFAULT_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LogSegmentData:
    """The files of one segment to copy (Kafka's LogSegmentData).

    Each is a path to stream from disk or the bytes themselves (Kafka hands the
    leader-epoch checkpoint over as a buffer). The transaction index is optional.
    """

    log_segment: Path | bytes
    offset_index: Path | bytes
    time_index: Path | bytes
    producer_snapshot_index: Path | bytes
    leader_epoch_index: Path | bytes
    transaction_index: Path | bytes | None = None

    def files(self) -> list[tuple[pb.SegmentFile, Path | bytes]]:
        listed: list[tuple[pb.SegmentFile, Path | bytes | None]] = [
            (pb.SEGMENT_FILE_LOG, self.log_segment),
            (pb.SEGMENT_FILE_OFFSET_INDEX, self.offset_index),
            (pb.SEGMENT_FILE_TIME_INDEX, self.time_index),
            (pb.SEGMENT_FILE_PRODUCER_SNAPSHOT, self.producer_snapshot_index),
            (pb.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT, self.leader_epoch_index),
            (pb.SEGMENT_FILE_TRANSACTION_INDEX, self.transaction_index),
        ]
        return [(kind, source) for kind, source in listed if source is not None]


async def _read_chunks(source: Path | bytes, chunk_bytes: int) -> AsyncIterator[bytes]:
    """At least one chunk (empty for an empty file), never the whole file in memory."""
    if isinstance(source, bytes):
        for start in range(0, max(len(source), 1), chunk_bytes):
            yield source[start : start + chunk_bytes]
        return
    with source.open("rb") as handle:
        first = True
        while True:
            data = await asyncio.to_thread(handle.read, chunk_bytes)
            if data or first:
                yield data
            if len(data) < chunk_bytes:
                return
            first = False


def encode_chunk(kind: int, position: int, data: bytes) -> bytes:
    """CopyLogSegmentDataRequest(chunk=SegmentDataChunk(...)) as its wire bytes (bulk_wire).

    Built through protobuf, every byte of the segment would be copied into the
    message and again when serialized.
    """
    chunk = [
        *bulk_wire.varint_field(1, kind),
        *bulk_wire.varint_field(2, position),
        *bulk_wire.bytes_field(3, data),
    ]
    return b"".join(bulk_wire.message_field(2, chunk))


class SegmentStoreClient(ServiceClient):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._stub = pb_grpc.SegmentStoreServiceStub(self.channel)
        methods = pb.DESCRIPTOR.services_by_name["SegmentStoreService"].methods_by_name
        self._copy_log_segment_data = bulk_method(self.channel, methods["CopyLogSegmentData"])
        self._fetch_log_segment = bulk_stream(
            self.channel, methods["FetchLogSegment"], 0, lambda m: (m.data, ())
        )
        self._fetch_log_segment_views = bulk_stream(
            self.channel, methods["FetchLogSegment"], 0, lambda m: (m.data, ()), views=True
        )
        self._fetch_index = bulk_stream(
            self.channel, methods["FetchIndex"], 0, lambda m: (m.data, ())
        )

    async def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Copy the segment; returns the store's custom metadata. Retried whole if unavailable."""
        first = pb.CopyLogSegmentDataRequest(metadata=segment_metadata_to_proto(metadata))

        async def requests() -> AsyncIterator[pb.CopyLogSegmentDataRequest | bytes]:
            yield first
            for kind, source in data.files():
                position = 0
                async with contextlib.aclosing(_read_chunks(source, chunk_bytes)) as pieces:
                    async for piece in pieces:
                        yield encode_chunk(kind, position, piece)
                        position += len(piece)

        response = await self.call_client_stream(
            self._copy_log_segment_data, requests, timeout_s=timeout_s
        )
        return response.custom_metadata if response.HasField("custom_metadata") else None

    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """The log's bytes from `start_position` to `end_position` (inclusive) or the end."""
        return cast(
            AsyncGenerator[bytes, None],
            self._log_segment(
                self._fetch_log_segment, metadata, start_position, end_position, timeout_s
            ),
        )

    def fetch_log_segment_views(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """As fetch_log_segment, each chunk a view of the message it arrived in.

        For a reader that copies the bytes on anyway (the fetch service cuts
        batches into its own messages): no copy here, one less per byte.
        """
        return self._log_segment(
            self._fetch_log_segment_views, metadata, start_position, end_position, timeout_s
        )

    async def _log_segment(
        self,
        method: grpc.aio.UnaryStreamMultiCallable,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None,
        timeout_s: float | None,
    ) -> AsyncGenerator[bytes | memoryview, None]:
        request = pb.FetchLogSegmentRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(metadata),
            start_position=start_position,
            end_position=end_position,
        )
        responses = self.call_server_stream(method, request, timeout_s=timeout_s)
        async with contextlib.aclosing(responses):
            async for data, _ in responses:
                yield data

    async def fetch_index(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_type: pb.IndexType.ValueType,
        *,
        timeout_s: float | None = None,
    ) -> bytes:
        """One whole index (indexes are small: Kafka caps them at segment.index.bytes)."""
        request = pb.FetchIndexRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(metadata), index_type=index_type
        )
        pieces = [
            data
            async for data, _ in self.call_server_stream(
                self._fetch_index, request, timeout_s=timeout_s
            )
        ]
        return b"".join(pieces)

    async def delete_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> None:
        await self.call_unary(
            self._stub.DeleteLogSegmentData,
            pb.DeleteLogSegmentDataRequest(
                remote_log_segment_metadata=segment_metadata_to_proto(metadata)
            ),
            timeout_s=timeout_s,
        )
