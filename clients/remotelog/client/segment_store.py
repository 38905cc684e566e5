"""SegmentStoreClient: what a broker (or the copy scheduler) calls as its RemoteStorageManager."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import grpc

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.api.segmentstore.v1 import short_circuit_pb2 as pb_short_circuit
from remotelog.client.base import ServiceClient, bulk_method, bulk_stream
from remotelog.client.fetch_urls import FetchUrls, UrlReader, UrlReadUnavailable
from remotelog.client.short_circuit import (
    MAPPED_READ_MIN,
    Descriptors,
    ShortCircuit,
    ShortCircuitUnavailable,
    lend,
    read_range,
)
from remotelog.core.errors import RemoteLogError, UnsupportedOperationError
from remotelog.core.model import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    last_fetch_position,
)
from remotelog.fileio.descriptor_socket import close_all
from remotelog.fileio.segment_chunks import segment_chunks
from remotelog.protocol.codecs import COPY_CHUNK, FETCH_INDEX_RESPONSE, FETCH_LOG_SEGMENT_RESPONSE
from remotelog.protocol.convert import segment_file_to_proto, segment_metadata_to_proto

DEFAULT_CHUNK_BYTES = 1024 * 1024
# After a read its URL could not finish, reads take the RPC for this long: an
# object store this host cannot reach would otherwise cost each read a timeout.
URL_PAUSE_S = 10.0
_log = logging.getLogger(__name__)


def _data(message: Any) -> tuple[bytes, tuple[int, ...]]:
    return message.data, ()


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
        self._short_circuit = ShortCircuit(short_circuit_socket) if short_circuit_socket else None
        # Off for fetches once the store says its backend has no local files (S3).
        self._short_circuit_fetch = self._short_circuit is not None
        self._descriptors: Descriptors[RemoteLogSegmentId] = Descriptors()
        # Off once the store says it hands out no URLs; paused after a failed read.
        self._fetch_urls = fetch_urls
        self._urls_paused_until = 0.0
        self._urls: FetchUrls[RemoteLogSegmentId] = FetchUrls()
        self._url_reader = UrlReader()
        self._stub = pb_grpc.SegmentStoreServiceStub(self.channel)  # type: ignore[no-untyped-call]
        methods = pb.DESCRIPTOR.services_by_name["SegmentStoreService"].methods_by_name
        self._copy_log_segment_data = bulk_method(self.channel, methods["CopyLogSegmentData"])
        fetch_log, fetch_index = methods["FetchLogSegment"], methods["FetchIndex"]
        log = FETCH_LOG_SEGMENT_RESPONSE
        self._fetch_log_segment = bulk_stream(self.channel, fetch_log, log, _data)
        self._fetch_log_segment_views = bulk_stream(self.channel, fetch_log, log, _data, views=True)
        self._fetch_index = bulk_stream(self.channel, fetch_index, FETCH_INDEX_RESPONSE, _data)

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
                    self._short_circuit, metadata, data, timeout_s
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
        deadline = time.monotonic() + (timeout_s or self.options.timeout_s)
        if self._fetch_urls and time.monotonic() >= self._urls_paused_until:
            last = last_fetch_position(metadata, start_position, end_position)
            by_url = self._read_by_url(metadata, start_position, last, deadline)
            async with contextlib.aclosing(by_url):
                async for piece in by_url:
                    start_position += len(piece)
                    yield piece
            if start_position > last:
                return
            # What the URL could not deliver, the RPC does.
            timeout_s = max(deadline - time.monotonic(), 0.001)
        request = pb.FetchLogSegmentRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(metadata),
            start_position=start_position,
            end_position=end_position,
        )
        if self._short_circuit is not None and self._short_circuit_fetch:
            views = method is self._fetch_log_segment_views
            if (
                views
                and end_position is not None
                and end_position - start_position < MAPPED_READ_MIN
            ):
                # A Fetch's range, page-cached, of a file already lent: a view, no copy.
                last_fetch_position(metadata, start_position, end_position)
                key = metadata.remote_log_segment_id
                cached = self._descriptors.cached_view(key, start_position, end_position + 1)
                if cached is not None:
                    yield cached
                    return
            opened = await self._lend_log(self._short_circuit, metadata, request, timeout_s)
            if opened is not None:
                fd, size = opened
                last = size - 1 if end_position is None else min(end_position, size - 1)
                chunks = read_range(fd, start_position, last, views=views)
                async with contextlib.aclosing(chunks):
                    async for chunk in chunks:
                        yield chunk
                return
        responses = self.call_server_stream(method, request, timeout_s=timeout_s)
        async with contextlib.aclosing(responses):
            async for data, _ in responses:
                yield data

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
        if self._short_circuit is None or not self._short_circuit_fetch:
            return None
        request = pb.FetchLogSegmentRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(metadata),
            start_position=start_position,
        )
        return await self._lend_log(self._short_circuit, metadata, request, timeout_s)

    async def _lend_log(
        self,
        channel: ShortCircuit,
        metadata: RemoteLogSegmentMetadata,
        request: pb.FetchLogSegmentRequest,
        timeout_s: float | None,
    ) -> tuple[int, int] | None:
        """A kept descriptor of the log (the range checked here as the store would), else
        one asked of the store; None where the RPC must do it."""
        key = metadata.remote_log_segment_id
        opened = self._descriptors.take(key)
        if opened is not None:
            end = request.end_position if request.HasField("end_position") else None
            last_fetch_position(metadata, request.start_position, end)
            return opened
        opened = await self._open_short_circuit(channel, request, timeout_s)
        if opened is not None:
            self._descriptors.keep(key, *opened)
        return opened

    async def _open_short_circuit(
        self, channel: ShortCircuit, request: pb.FetchLogSegmentRequest, timeout_s: float | None
    ) -> tuple[int, int] | None:
        """(descriptor, size) of the stored log; None where the RPC must do it."""
        fetch = pb_short_circuit.ShortCircuitRequest(fetch_log_segment=request)

        async def attempt(remaining_s: float) -> tuple[int, int]:
            response, fds = await channel.call(fetch, timeout_s=remaining_s)
            if len(fds) != 1:
                close_all(fds)
                raise ShortCircuitUnavailable("the store sent no descriptor")
            return fds[0], response.object_size

        try:
            return await self.call_retrying(attempt, timeout_s=timeout_s)
        except ShortCircuitUnavailable:
            return None
        except UnsupportedOperationError:
            self._short_circuit_fetch = False
            return None

    async def _read_by_url(
        self, metadata: RemoteLogSegmentMetadata, start: int, last: int, deadline: float
    ) -> AsyncGenerator[bytes, None]:
        """Bytes start..last from the log's URL; ends early where the RPC must go on.

        A URL refused with 403 (expired early: the store's clock runs ahead) is
        replaced once.
        """
        key = metadata.remote_log_segment_id
        what = f"segment {key.id} of {metadata.topic_id_partition}"
        for renewed in (False, True):
            url = self._urls.get(key)
            if url is None:
                url = await self._log_segment_url(metadata, deadline)
                if url is None:
                    return
            reads = self._url_reader.read(
                url, start, last, what=what, timeout_s=max(deadline - time.monotonic(), 0.001)
            )
            try:
                async with contextlib.aclosing(reads):
                    async for chunk in reads:
                        start += len(chunk)
                        yield chunk
                return
            except UrlReadUnavailable as exc:
                self._urls.forget(key)
                if not exc.refused or renewed:
                    self._urls_paused_until = time.monotonic() + URL_PAUSE_S
                    _log.warning("fetching through the segment store instead: %s", exc)
                    return

    async def get_log_segment_url(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> tuple[str, float]:
        """(URL, seconds it lasts) from which the log's bytes are read with ranged GETs.

        UnsupportedOperationError where the store hands out none (filesystem
        backend, `storage.s3.fetch.url.expiry.ms` unset). The URL grants a read
        of the object to whoever holds it: do not log it.
        """
        response = await self.call_unary(
            self._stub.GetLogSegmentUrl,
            pb.GetLogSegmentUrlRequest(
                remote_log_segment_metadata=segment_metadata_to_proto(metadata)
            ),
            timeout_s=timeout_s,
        )
        return str(response.url), response.valid_for_ms / 1000

    async def _log_segment_url(
        self, metadata: RemoteLogSegmentMetadata, deadline: float
    ) -> str | None:
        """A new URL of the log, kept for the next reads; None where there are none."""
        try:
            url, valid_for_s = await self.get_log_segment_url(
                metadata, timeout_s=max(deadline - time.monotonic(), 0.001)
            )
        except RemoteLogError as exc:
            if exc.code != "UNIMPLEMENTED":  # a store with no URLs, or an older one
                raise
            self._fetch_urls = False
            return None
        self._urls.keep(metadata.remote_log_segment_id, url, valid_for_s)
        return url

    async def close(self) -> None:
        if self._short_circuit is not None:
            self._short_circuit.close()
        self._descriptors.close()
        await self._url_reader.close()
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
