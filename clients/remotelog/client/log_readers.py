"""One reader of a stored log's bytes per transport, tried in turn by SegmentStoreClient.

Each reader yields what it can of the range from its start, in order; a reader
that ends before the range does hands the rest to the next one. The last is
always the gRPC stream, which reads any range or reports why not. Which readers
come before it is chosen where the client is made (`fetch_urls`,
`short_circuit_socket`), as a service is assembled from its config.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import short_circuit_pb2 as pb_short_circuit
from remotelog.client.short_circuit import (
    MAPPED_READ_MIN,
    Descriptors,
    ShortCircuit,
    ShortCircuitUnavailable,
    read_range,
)
from remotelog.client.url_reader import UrlReader, UrlReadUnavailable
from remotelog.core.errors import (
    SCOPE_KEY,
    SEGMENT_SCOPE,
    RemoteLogError,
    RemoteStorageError,
    UnsupportedOperationError,
)
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SignedLog,
    StoredChunks,
)
from remotelog.fileio.descriptor_socket import close_all
from remotelog.fileio.url_cache import SignedUrlCache
from remotelog.protocol.convert import segment_metadata_to_proto
from remotelog.transforms.chunks import ChunkCodec, ChunkIndex, DataKey, SegmentObjectKind

LogPiece = bytes | memoryview
# After a read its URL could not finish, reads take the next reader for this long: an
# object store this host cannot reach would otherwise cost each read a timeout.
URL_PAUSE_S = 10.0
NO_URL_SEGMENTS = 4096
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogRange:
    """What is still wanted of a log: bytes `start`..`last`, as the caller asked for
    `start`..`end` (None: to the end), within `deadline` (time.monotonic())."""

    metadata: RemoteLogSegmentMetadata
    start: int
    end: int | None
    last: int
    views: bool
    deadline: float

    def remaining_s(self) -> float:
        return max(self.deadline - time.monotonic(), 0.001)

    def request(self) -> pb.FetchLogSegmentRequest:
        return pb.FetchLogSegmentRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(self.metadata),
            start_position=self.start,
            end_position=self.end,
        )


class LogReader(Protocol):
    def read(self, wanted: LogRange) -> AsyncGenerator[LogPiece, None]:
        """Bytes of `wanted` from its start, in order; ending early leaves the rest to the
        next reader."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LogChunks:
    """How a log read by URL is stored as chunks, and its data key (None: not encrypted)."""

    index: ChunkIndex
    data_key: bytes | None = field(repr=False)

    @classmethod
    def of(cls, metadata: RemoteLogSegmentMetadata, stored: StoredChunks) -> LogChunks:
        """The chunks of the segment's log as the store or fetch service describes them;
        RemoteStorageError where they cannot be its log's."""
        try:
            index = ChunkIndex(
                stored.chunk_size, metadata.segment_size_in_bytes, stored.stored_sizes
            )
        except ValueError as exc:
            raise RemoteStorageError(
                f"segment {metadata.remote_log_segment_id.id}: the chunks of its log: {exc}"
            ) from None
        return cls(index, stored.data_key)

    def codec(self, segment_id: RemoteLogSegmentId) -> ChunkCodec:
        """The codec that decodes the log's chunks."""
        key = None if self.data_key is None else DataKey(self.data_key, "", "", b"")
        tip = segment_id.topic_id_partition
        return ChunkCodec(tip.topic_id, segment_id.id, SegmentObjectKind.LOG, None, key)


# A log's URL, and how the log is stored where it is stored as chunks.
KeptUrl = tuple[str, LogChunks | None]


class UrlLogReader:
    """Ranged reads of the URL the store signs for the log (a presigned S3 URL, or a file
    on this host); a log stored as chunks is read by its chunks and decoded here. Off
    once the store says it hands out none; paused after a failure."""

    def __init__(
        self, sign: Callable[[RemoteLogSegmentMetadata, float], Awaitable[SignedLog]]
    ) -> None:
        self._sign = sign  # (metadata, timeout_s) -> the URL, its life and its chunks
        self._enabled = True
        self._paused_until = 0.0
        # Each URL with how its segment's log is stored: as chunks, or plain (None).
        self._urls: SignedUrlCache[RemoteLogSegmentId, KeptUrl] = SignedUrlCache()
        # Segments the store has no URL for (stored as chunks): read by the next reader.
        self._no_url: OrderedDict[RemoteLogSegmentId, None] = OrderedDict()
        self._reader = UrlReader()

    async def read(self, wanted: LogRange) -> AsyncGenerator[LogPiece, None]:
        """A URL refused with 403 (expired early: the store's clock runs ahead) is replaced
        once; any other failure pauses the URLs and leaves the rest to the next reader."""
        if not self._enabled or time.monotonic() < self._paused_until:
            return
        key = wanted.metadata.remote_log_segment_id
        what = f"segment {key.id} of {wanted.metadata.topic_id_partition}"
        start = wanted.start
        for renewed in (False, True):
            kept = self._urls.get(key) or await self._new_url(wanted)
            if kept is None:
                return
            url, chunks = kept
            reads: AsyncGenerator[LogPiece, None]
            if chunks is None:
                reads = self._reader.read(
                    url, start, wanted.last, what=what, timeout_s=wanted.remaining_s()
                )
            else:
                reads = self._read_chunks(url, chunks, wanted, start, what)
            try:
                async with contextlib.aclosing(reads):
                    async for chunk in reads:
                        start += len(chunk)
                        yield chunk
                return
            except UrlReadUnavailable as exc:
                self._urls.forget(key)
                if not exc.refused or renewed:
                    self._paused_until = time.monotonic() + URL_PAUSE_S
                    _log.warning("fetching through the segment store instead: %s", exc)
                    return

    async def _new_url(self, wanted: LogRange) -> KeptUrl | None:
        """A new URL of the log, kept for the next reads; None where there are none."""
        key = wanted.metadata.remote_log_segment_id
        if key in self._no_url:
            return None
        try:
            signed = await self._sign(wanted.metadata, wanted.remaining_s())
        except RemoteLogError as exc:
            if exc.code != "UNIMPLEMENTED":  # a store with no URLs, or an older one
                raise
            if exc.metadata.get(SCOPE_KEY) == SEGMENT_SCOPE:  # this segment has none
                self._no_url[key] = None
                while len(self._no_url) > NO_URL_SEGMENTS:
                    self._no_url.popitem(last=False)
                return None
            self._enabled = False
            return None
        chunks = None if signed.chunks is None else LogChunks.of(wanted.metadata, signed.chunks)
        kept = (signed.url, chunks)
        self._urls.keep(key, kept, signed.valid_for_s)
        return kept

    async def _read_chunks(
        self, url: str, chunks: LogChunks, wanted: LogRange, start: int, what: str
    ) -> AsyncGenerator[LogPiece, None]:
        """Original bytes `start`..`wanted.last` of a log stored as chunks: each chunk
        that holds them GET by its stored range and decoded (authenticated) whole in a
        worker thread before any of its bytes is yielded."""
        codec = chunks.codec(wanted.metadata.remote_log_segment_id)
        index = chunks.index
        first_chunk, last_chunk = index.chunks_of(start, wanted.last)
        for number in range(first_chunk, last_chunk + 1):
            stored_first, stored_last = index.stored_range(number, number)
            pieces = self._reader.read(
                url, stored_first, stored_last, what=what, timeout_s=wanted.remaining_s()
            )
            async with contextlib.aclosing(pieces):
                stored = b"".join([bytes(piece) async for piece in pieces])
            original = await asyncio.to_thread(
                codec.decode, number, stored, index.original_size_of(number)
            )
            yield memoryview(original)[index.within(number, start, wanted.last)]

    async def close(self) -> None:
        await self._reader.close()


class ShortCircuitLogReader:
    """The stored log file itself, lent by a store on this host over its short-circuit
    socket and read from the page cache here. Off once the store says its backend keeps
    no local files (S3)."""

    def __init__(
        self,
        channel: ShortCircuit,
        call_retrying: Callable[..., Awaitable[tuple[int, int]]],
    ) -> None:
        self.channel = channel
        self._call_retrying = call_retrying  # ServiceClient.call_retrying
        self._enabled = True
        self._descriptors: Descriptors[RemoteLogSegmentId] = Descriptors()

    async def read(self, wanted: LogRange) -> AsyncGenerator[LogPiece, None]:
        if not self._enabled:
            return
        if wanted.views and wanted.end is not None and wanted.end - wanted.start < MAPPED_READ_MIN:
            # A Fetch's range, page-cached, of a file already lent: a view, no copy.
            key = wanted.metadata.remote_log_segment_id
            cached = self._descriptors.cached_view(key, wanted.start, wanted.last + 1)
            if cached is not None:
                yield cached
                return
        opened = await self.open(wanted.metadata, wanted.request(), wanted.remaining_s())
        if opened is None:
            return
        fd, size = opened
        last = size - 1 if wanted.end is None else min(wanted.end, size - 1)
        chunks = read_range(fd, wanted.start, last, views=wanted.views)
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield chunk

    async def open(
        self,
        metadata: RemoteLogSegmentMetadata,
        request: pb.FetchLogSegmentRequest,
        timeout_s: float | None,
    ) -> tuple[int, int] | None:
        """(descriptor, size) of the stored log: one kept from an earlier read, else one
        asked of the store; None where the RPC must do it."""
        if not self._enabled:
            return None
        key = metadata.remote_log_segment_id
        opened = self._descriptors.take(key)
        if opened is not None:
            return opened
        fetch = pb_short_circuit.ShortCircuitRequest(fetch_log_segment=request)

        async def attempt(remaining_s: float) -> tuple[int, int]:
            response, fds = await self.channel.call(fetch, timeout_s=remaining_s)
            if len(fds) != 1:
                close_all(fds)
                raise ShortCircuitUnavailable("the store sent no descriptor")
            return fds[0], response.object_size

        try:
            opened = await self._call_retrying(attempt, timeout_s=timeout_s)
        except ShortCircuitUnavailable:
            return None
        except UnsupportedOperationError:
            self._enabled = False
            return None
        self._descriptors.keep(key, *opened)
        return opened

    async def close(self) -> None:
        self.channel.close()
        self._descriptors.close()


class GrpcLogReader:
    """The store's FetchLogSegment stream: reads any range, or raises why not."""

    def __init__(
        self,
        call_server_stream: Callable[..., AsyncGenerator[Any, None]],
        copies: Any,
        views: Any,
    ) -> None:
        self._call_server_stream = call_server_stream  # ServiceClient.call_server_stream
        self._copies, self._views = copies, views  # the method, without and with views

    async def read(self, wanted: LogRange) -> AsyncGenerator[LogPiece, None]:
        method = self._views if wanted.views else self._copies
        responses = self._call_server_stream(
            method, wanted.request(), timeout_s=wanted.remaining_s()
        )
        async with contextlib.aclosing(responses):
            async for data, _ in responses:
                yield data

    async def close(self) -> None:
        return None
