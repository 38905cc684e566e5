"""SegmentStoreClient: what a broker (or the copy scheduler) calls as its RemoteStorageManager."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.api.segmentstore.v1 import short_circuit_pb2 as pb_short_circuit
from remotelog.client.base import ServiceClient, bulk_method, bulk_stream
from remotelog.client.log_readers import (
    GrpcLogReader,
    LogRange,
    LogReader,
    ShortCircuitLogReader,
    UrlLogReader,
)
from remotelog.client.short_circuit import (
    ShortCircuit,
    ShortCircuitUnavailable,
    lend,
)
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    SignedLog,
    StoredChunks,
    last_fetch_position,
)
from remotelog.fileio.descriptor_socket import close_all
from remotelog.fileio.segment_chunks import segment_chunks
from remotelog.protocol.codecs import COPY_CHUNK, FETCH_INDEX_RESPONSE, FETCH_LOG_SEGMENT_RESPONSE
from remotelog.protocol.convert import (
    segment_file_to_proto,
    segment_metadata_from_proto,
    segment_metadata_to_proto,
)

DEFAULT_CHUNK_BYTES = 1024 * 1024


class SegmentStoreClient(ServiceClient):
    """The store's RPCs; with `short_circuit_socket` (the store's `short.circuit.socket.path`,
    for a client on its host) copies and fetches pass file descriptors instead of bytes
    where the store can take them, and fall back to the RPCs where it cannot. With
    `fetch_urls`, fetches read the log from the URL the store signs for it (S3 with
    `storage.s3.fetch.url.expiry.ms`), and take the RPC where there is none."""

    def __init__(
        self,
        *args: object,
        short_circuit_socket: str | None = None,
        fetch_urls: bool = False,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._stub = pb_grpc.SegmentStoreServiceStub(self.channel)  # type: ignore[no-untyped-call]
        methods = pb.DESCRIPTOR.services_by_name["SegmentStoreService"].methods_by_name
        self._copy_log_segment_data = bulk_method(self.channel, methods["CopyLogSegmentData"])
        fetch_log, fetch_index = methods["FetchLogSegment"], methods["FetchIndex"]
        log = FETCH_LOG_SEGMENT_RESPONSE
        self._fetch_log_segment = bulk_stream(self.channel, fetch_log, log)
        self._fetch_log_segment_views = bulk_stream(self.channel, fetch_log, log, views=True)
        self._fetch_index = bulk_stream(self.channel, fetch_index, FETCH_INDEX_RESPONSE)
        # The transports a log is read by, in the order tried; the stream comes last.
        self._short_circuit = (
            ShortCircuitLogReader(ShortCircuit(short_circuit_socket), self.call_retrying)
            if short_circuit_socket
            else None
        )
        self._log_readers: list[LogReader] = [
            *([UrlLogReader(self._sign)] if fetch_urls else []),
            *([self._short_circuit] if self._short_circuit is not None else []),
            GrpcLogReader(
                self.call_server_stream, self._fetch_log_segment, self._fetch_log_segment_views
            ),
        ]

    async def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Copy the segment; returns the store's custom metadata. Retried whole if unavailable."""
        if self._short_circuit is not None:
            with contextlib.suppress(ShortCircuitUnavailable):  # then the stream below does it
                return await self._copy_short_circuit(
                    self._short_circuit.channel, metadata, data, timeout_s
                )
        first = pb.CopyLogSegmentDataRequest(metadata=segment_metadata_to_proto(metadata))

        async def requests() -> AsyncIterator[pb.CopyLogSegmentDataRequest | bytes]:
            yield first
            async with contextlib.aclosing(segment_chunks(data, chunk_bytes)) as chunks:
                async for kind, position, piece in chunks:
                    yield COPY_CHUNK.encode(segment_file_to_proto(kind), position, piece)

        response = await self.call_client_stream(
            self._copy_log_segment_data, requests, timeout_s=timeout_s
        )
        return response.custom_metadata if response.HasField("custom_metadata") else None

    async def _copy_short_circuit(
        self,
        channel: ShortCircuit,
        metadata: RemoteLogSegmentMetadata,
        data: LogSegmentData,
        timeout_s: float | None,
    ) -> bytes | None:
        files = data.files()
        request = pb_short_circuit.ShortCircuitRequest(
            copy_log_segment_data=pb_short_circuit.ShortCircuitCopy(
                metadata=segment_metadata_to_proto(metadata),
                files=[segment_file_to_proto(kind) for kind, _ in files],
            )
        )
        fds: list[int] = []
        try:
            for kind, source in files:
                fds.append(lend(source, kind.name))

            async def attempt(remaining_s: float) -> pb_short_circuit.ShortCircuitResponse:
                response, extra = await channel.call(request, fds, timeout_s=remaining_s)
                close_all(extra)
                return response

            response = await self.call_retrying(attempt, timeout_s=timeout_s)
        finally:
            close_all(fds)
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
            self._log_segment(metadata, start_position, end_position, timeout_s, views=False),
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
        return self._log_segment(metadata, start_position, end_position, timeout_s, views=True)

    async def _log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None,
        timeout_s: float | None,
        *,
        views: bool,
    ) -> AsyncGenerator[bytes | memoryview, None]:
        deadline = time.monotonic() + (timeout_s or self.options.timeout_s)
        readers = self._log_readers
        try:
            last = last_fetch_position(metadata, start_position, end_position)
        except InvalidArgumentError:
            readers, last = readers[-1:], -1  # the store reports what no fetch can have
        wanted = LogRange(metadata, start_position, end_position, last, views, deadline)
        for reader in readers:
            position = wanted.start
            pieces = reader.read(wanted)
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    position += len(piece)
                    yield piece
            if position > last:
                return
            wanted = dataclasses.replace(wanted, start=position)

    async def open_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        *,
        timeout_s: float | None = None,
    ) -> tuple[int, int] | None:
        """(a descriptor of the stored log, the caller's to close; its size) when the store
        lends it over the short circuit, for a caller that reads the file itself from
        `start_position`; None where the bytes must come by fetch_log_segment."""
        if self._short_circuit is None:
            return None
        last_fetch_position(metadata, start_position, None)  # as the store would check
        request = pb.FetchLogSegmentRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(metadata),
            start_position=start_position,
        )
        opened: tuple[int, int] | None = await self._short_circuit.open(
            metadata, request, timeout_s
        )
        return opened

    async def get_log_segment_url(
        self,
        metadata: RemoteLogSegmentMetadata,
        *,
        chunks_accepted: bool = False,
        timeout_s: float | None = None,
    ) -> SignedLog:
        """A URL from which the log's bytes are read with ranged GETs, and how long it
        lasts; with `chunks_accepted`, for a log stored as chunks too, with how it is
        stored (the caller decodes them).

        UnsupportedOperationError where the store hands out none (filesystem
        backend, `storage.s3.fetch.url.expiry.ms` unset), or none for this segment. The
        URL grants a read of the object to whoever holds it: do not log it.
        """
        response = await self.call_unary(
            self._stub.GetLogSegmentUrl,
            pb.GetLogSegmentUrlRequest(
                remote_log_segment_metadata=segment_metadata_to_proto(metadata),
                chunks_accepted=chunks_accepted,
            ),
            timeout_s=timeout_s,
        )
        chunks = None
        if response.HasField("chunks"):
            c = response.chunks
            chunks = StoredChunks(c.chunk_size, tuple(c.log_stored_sizes), c.data_key or None)
        return SignedLog(str(response.url), response.valid_for_ms / 1000, chunks)

    async def _sign(self, metadata: RemoteLogSegmentMetadata, timeout_s: float) -> SignedLog:
        return await self.get_log_segment_url(metadata, chunks_accepted=True, timeout_s=timeout_s)

    async def close(self) -> None:
        for reader in self._log_readers:
            await reader.close()
        await super().close()

    async def fetch_index(
        self,
        metadata: RemoteLogSegmentMetadata,
        index_type: IndexType,
        *,
        timeout_s: float | None = None,
    ) -> bytes:
        """One whole index (indexes are small: Kafka caps them at segment.index.bytes)."""
        request = pb.FetchIndexRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(metadata),
            index_type=int(index_type),  # type: ignore[arg-type]
        )
        pieces = [
            data
            async for data, _ in self.call_server_stream(
                self._fetch_index, request, timeout_s=timeout_s
            )
        ]
        return b"".join(pieces)

    async def describe_log_segment(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> tuple[RemoteLogSegmentMetadata, bytes | None]:
        """The segment as its manifest in the store describes it, and the custom metadata
        its copy returned; RemoteResourceNotFoundError where the store has no manifest."""
        response = await self.call_unary(
            self._stub.DescribeLogSegment,
            pb.DescribeLogSegmentRequest(
                remote_log_segment_metadata=segment_metadata_to_proto(metadata)
            ),
            timeout_s=timeout_s,
        )
        described = segment_metadata_from_proto(response.remote_log_segment_metadata)
        return described, response.custom_metadata or None

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
