"""KIP-405's RemoteStorageManager over an ObjectStore: copy, fetch, fetch index, delete.

No grpc here: the servicer turns requests into these calls and errors into
statuses. A copy streams the log into the backend as it arrives (memory bounded
by the backend's part buffering), keeps the indexes (small: Kafka caps each at
`segment.index.bytes`) until the end, then writes `.indexes` and finally the
manifest. Any failure removes what the copy wrote, so a retried copy starts
clean and a failed one leaves nothing that a reader could take for a segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from opentelemetry import trace
from opentelemetry.trace import StatusCode

from remotelog.core import metrics as m
from remotelog.core.errors import (
    SCOPE_KEY,
    SEGMENT_SCOPE,
    InvalidArgumentError,
    RemoteResourceNotFoundError,
    UnsupportedOperationError,
)
from remotelog.core.model import RemoteLogSegmentMetadata, SegmentFile, last_fetch_position
from remotelog.core.states import RemoteLogSegmentState
from remotelog.core.tasks import read_ahead
from remotelog.segmentstore.backend import (
    Chunk,
    LocalFileStore,
    LocalFileUpload,
    ObjectStore,
    PresigningStore,
    Upload,
    UploadSigningStore,
)
from remotelog.segmentstore.key_providers import KeyNotFoundError
from remotelog.segmentstore.layout import (
    INDEX_FILES,
    REQUIRED_FILES,
    IndexRange,
    Manifest,
    SegmentKeys,
    index_ranges,
    segment_custom_metadata,
)
from remotelog.segmentstore.read_ahead import ReadAhead
from remotelog.segmentstore.transformed import (
    DecodedChunks,
    SegmentEncoder,
    TransformOptions,
    data_key_of,
    read_original,
)
from remotelog.transforms.chunks import ChunkIndex, SegmentObjectKind

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("remotelog.segmentstore")
# How long close() waits for the cleanups of failed copies before cancelling them.
_DISCARD_GRACE_S = 10.0
# How long a file:// fetch URL is said to last.
LOCAL_URL_VALID_S = 3600
# Chunks of a long log read fetched ahead of the consumer (memory: this x chunk size).
_READ_AHEAD_CHUNKS = 4
SCOPE = "remotelog.segmentstore"
AUX_STATE_FILES = frozenset({SegmentFile.LEADER_EPOCH_CHECKPOINT, SegmentFile.PRODUCER_SNAPSHOT})


# Bytes of a lent file read per hop when the backend cannot copy from it itself.
_FILE_READ_BLOCK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileSlice:
    """`length` bytes from `offset` of a file a caller lends by descriptor (short circuit).

    Read with pread, never mapped: the caller may shrink its file meanwhile,
    and touching a mapping past a file's end kills the process (SIGBUS).
    """

    fd: int
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True, slots=True)
class SegmentChunk:
    """A piece of one of a segment's files, at `position` within that file."""

    file: SegmentFile
    position: int
    data: Chunk | FileSlice  # may be a view of a received message, or a lent file


@dataclass(frozen=True)
class StoreOptions:
    key_prefix: str = ""
    fetch_chunk_size: int = 1024 * 1024
    custom_metadata_max_bytes: int = 128
    # All indexes of one segment together; Kafka's default segment.index.bytes is 10 MiB each.
    max_index_bytes: int = 64 * 1024 * 1024
    manifest_cache_entries: int = 4096
    # How long a fetch URL (GetLogSegmentUrl) lasts; 0 = none are handed out.
    fetch_url_expiry_s: int = 0
    # file:// URLs of a filesystem backend's logs, for callers on this host.
    local_fetch_urls: bool = False
    # Reads of an object store in chunks, some asked for ahead (read_ahead.py); 0 = off.
    # A filesystem backend needs none: the page cache reads ahead.
    read_ahead_chunks: int = 0
    read_ahead_chunk_bytes: int = 1024 * 1024
    read_ahead_max_bytes: int = 64 * 1024 * 1024
    # How new segments are chunked, compressed and encrypted, and the keys that open
    # encrypted ones (transformed.py); None: every new segment is plain, version 1.
    transforms: TransformOptions | None = None
    # Whether a chunked segment's data key may go to a caller by URL: only where the
    # service serves TLS (its callers are authenticated by the roles as well).
    data_keys_over_tls: bool = False


@dataclass(frozen=True, slots=True)
class SegmentUrls:
    """Where a caller reads a segment's log and indexes itself (GetLogSegmentUrl)."""

    log: str
    valid_for_s: int
    indexes: str
    # Where each index the segment has lies in the object at `indexes`.
    index_ranges: dict[SegmentFile, IndexRange]
    # For a segment stored as chunks: how, and the key that opens them.
    chunks: UrlChunks | None = None


@dataclass(frozen=True, slots=True)
class UrlChunks:
    """What a caller needs to decode a chunked segment's objects read by URL."""

    log: ChunkIndex
    indexes: ChunkIndex
    data_key: bytes | None = field(repr=False)  # None: not encrypted


class SegmentStore:
    def __init__(self, objects: ObjectStore, options: StoreOptions) -> None:
        self.objects = objects
        self.options = options
        # The backend's optional roles, found once: isinstance against a runtime-
        # checkable Protocol inspects each of its members, tens of µs a call.
        self.local_files = objects if isinstance(objects, LocalFileStore) else None
        self.presigning = objects if isinstance(objects, PresigningStore) else None
        self.upload_signing = objects if isinstance(objects, UploadSigningStore) else None
        self._metrics = m.Instruments(SCOPE, m.STORE)
        self._manifests: OrderedDict[str, Manifest] = OrderedDict()
        # Cleanups of failed copies still running after their call was cancelled.
        self._discards: set[asyncio.Task[None]] = set()
        threads = options.transforms.threads if options.transforms is not None else 1
        # Chunks are compressed, encrypted and decoded here, never on the event loop.
        self._chunk_executor = ThreadPoolExecutor(threads, thread_name_prefix="chunks")
        self._decoded = DecodedChunks(
            options.transforms.decoded_cache_bytes if options.transforms is not None else 0
        )
        self._read_ahead: ReadAhead | None = None
        if options.read_ahead_chunks > 0 and self.local_files is None:
            self._read_ahead = ReadAhead(
                self._fetch_range,
                chunk_bytes=options.read_ahead_chunk_bytes,
                ahead=options.read_ahead_chunks,
                max_bytes=options.read_ahead_max_bytes,
                on_ahead=partial(self._metrics.add, m.STORE_READ_AHEAD_CHUNKS, 1),
                on_hit=partial(self._metrics.add, m.STORE_READ_AHEAD_HITS, 1),
            )

    async def close(self) -> None:
        """Let the cleanups of failed copies finish, then close the backend under them."""
        if self._discards:
            _, late = await asyncio.wait(self._discards, timeout=_DISCARD_GRACE_S)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        if self._read_ahead is not None:
            await self._read_ahead.close()
        self._chunk_executor.shutdown(wait=True)
        transforms = self.options.transforms
        if transforms is not None and transforms.keys is not None:
            await transforms.keys.provider.close()
        await self.objects.close()

    @property
    def transforms_new_segments(self) -> bool:
        transforms = self.options.transforms
        return transforms is not None and transforms.transforms_new_segments

    async def _fetch_range(self, key: str, first: int, last: int) -> bytes:
        """Bytes `first`..`last` of an object, fewer where it ends first: one chunk."""
        parts = []
        chunks = self.objects.read(key, first, last, last - first + 1)
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                parts.append(chunk)
        return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)

    def _read(self, key: str, start: int, last: int) -> AsyncGenerator[Chunk, None]:
        """Bytes `start`..`last` of an object, by chunks read ahead where that is on."""
        if self._read_ahead is not None:
            return self._read_ahead.read(key, start, last, self.options.fetch_chunk_size)
        return self.objects.read(key, start, last, self.options.fetch_chunk_size)

    async def _read_transformed(
        self, keys: SegmentKeys, manifest: Manifest, kind: SegmentObjectKind, first: int, last: int
    ) -> AsyncGenerator[Chunk, None]:
        """Original bytes `first`..`last` of one object of a version-2 segment."""
        transforms = self.options.transforms
        key_cache = transforms.keys if transforms else None
        try:
            data_key = await data_key_of(manifest, key_cache, keys.manifest)
        except KeyNotFoundError:
            # Re-wrapped since this manifest was cached (remotelog keys rewrap), its
            # old key since retired: the bucket's manifest names the new one.
            self._manifests.pop(keys.base, None)
            fresh = await self._manifest(keys)
            if fresh == manifest:
                raise
            manifest = fresh
            data_key = await data_key_of(manifest, key_cache, keys.manifest)
        key = keys.log if kind is SegmentObjectKind.LOG else keys.indexes
        return read_original(
            manifest,
            kind,
            first,
            last,
            data_key,
            partial(self._read, key),
            self._chunk_executor,
            self._decoded,
            key,
            min(self.options.fetch_chunk_size, self.options.read_ahead_chunk_bytes),
        )

    async def _plain(self, keys: SegmentKeys, what: str) -> None:
        """UnsupportedOperationError for a segment stored as chunks: its objects' bytes
        are not its original bytes, so `what` (a URL, a descriptor) cannot serve it."""
        if (await self._manifest(keys)).transforms is not None:
            # Of this segment only: the caller still takes URLs for the others.
            raise UnsupportedOperationError(
                f"{keys.base} is stored compressed or encrypted (manifest version 2): "
                f"no {what} serves its bytes; use FetchLogSegment",
                metadata={SCOPE_KEY: SEGMENT_SCOPE},
            )

    def keys(self, metadata: RemoteLogSegmentMetadata) -> SegmentKeys:
        return SegmentKeys.of(self.options.key_prefix, metadata)

    # -- copy ------------------------------------------------------------------

    async def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, chunks: AsyncIterator[SegmentChunk]
    ) -> bytes | None:
        """Store the segment; returns KIP-917 custom metadata (or None)."""
        return await self.recorded_copy(
            metadata, "copy_log_segment_data", partial(self._copy, metadata=metadata, chunks=chunks)
        )

    async def recorded_copy(
        self,
        metadata: RemoteLogSegmentMetadata,
        what: str,
        copy: Callable[[SegmentKeys], Awaitable[int]],
    ) -> bytes | None:
        """A copy counted and traced as one; `copy` stores the segment under its keys and
        returns the bytes stored. The segment's KIP-917 custom metadata (or None)."""
        check_copy_state(metadata)
        attributes = {"topic": metadata.topic_id_partition.topic}
        keys = self.keys(metadata)
        self._metrics.add(m.STORE_COPY_REQUESTS, 1, attributes)
        with _tracer.start_as_current_span(
            f"SegmentStore.{what}",
            attributes={**attributes, "remote_log_segment_id": str(metadata.remote_log_segment_id)},
        ):
            try:
                size = await copy(keys)
            except BaseException:
                self._metrics.add(m.STORE_COPY_ERRORS, 1, attributes)
                raise
        self._metrics.add(m.STORE_COPY_BYTES, size, attributes)
        return segment_custom_metadata(size, keys, self.options.custom_metadata_max_bytes)

    async def publish(self, keys: SegmentKeys, manifest: Manifest) -> None:
        """Write the manifest, last: from then on the segment is complete."""
        await self.objects.put(keys.manifest, manifest.to_json())
        # Kept: the segment's first reads (Kafka reads what it just copied for
        # followers and consumers) need it, and a fetch reads it before any byte.
        self._remember(keys, manifest)

    async def discard(self, abort: Callable[[], Awaitable[None]], keys: SegmentKeys | None) -> None:
        """Clean up after a failed copy: `abort` its upload, then delete the segment's
        objects (`keys`; None when it wrote none)."""
        # A shielded task: a cancelled call (client gone) is cancelled again by
        # grpc while cleaning up; the cleanup still runs to its end, close()
        # waits for it, and its failure is logged, not left unretrieved.
        discard = asyncio.create_task(self._discard(abort, keys))
        self._discards.add(discard)
        discard.add_done_callback(self._discarded)
        await asyncio.shield(discard)

    async def _copy(
        self,
        keys: SegmentKeys,
        metadata: RemoteLogSegmentMetadata,
        chunks: AsyncIterator[SegmentChunk],
    ) -> int:
        received: dict[SegmentFile, int] = {}
        indexes: dict[SegmentFile, bytearray] = {}
        index_bytes = 0
        encoder = None
        if self.options.transforms is not None and self.transforms_new_segments:
            # The data key first (a KMS call): a KMS that does not answer fails the
            # copy before anything is written.
            encoder = await SegmentEncoder.new(
                self.options.transforms, self._chunk_executor, metadata
            )
        upload: Upload = self.objects.open_upload(keys.log)
        chunking = None if encoder is None else encoder.log_upload(upload)
        if chunking is not None:
            upload = chunking
        written_objects = False
        try:
            async for chunk in chunks:
                expected = received.get(chunk.file, 0)
                if chunk.position != expected:
                    raise InvalidArgumentError(
                        "chunk.position",
                        f"{chunk.file.value} chunk at {chunk.position}, expected {expected} "
                        "(chunks of a file must arrive in order without gaps)",
                    )
                received[chunk.file] = expected + len(chunk.data)
                if chunk.file is SegmentFile.LOG:
                    if received[chunk.file] > metadata.segment_size_in_bytes:
                        raise InvalidArgumentError(
                            "chunk.data",
                            f"log passes segment_size_in_bytes {metadata.segment_size_in_bytes}",
                        )
                    if isinstance(chunk.data, FileSlice):
                        await _write_slice(upload, chunk.data)
                    else:
                        await upload.write(chunk.data)
                    continue
                index_bytes += len(chunk.data)
                if index_bytes > self.options.max_index_bytes:
                    raise InvalidArgumentError(
                        "chunk.data",
                        f"indexes exceed {self.options.max_index_bytes} bytes",
                    )
                piece = chunk.data
                if isinstance(piece, FileSlice):
                    piece = await _read_slice(piece, chunk.file)
                indexes.setdefault(chunk.file, bytearray()).extend(piece)
            missing = sorted(f.value for f in REQUIRED_FILES - received.keys())
            if missing:
                raise InvalidArgumentError("chunk.file", f"missing files: {', '.join(missing)}")
            if received[SegmentFile.LOG] != metadata.segment_size_in_bytes:
                raise InvalidArgumentError(
                    "metadata.segment_size_in_bytes",
                    f"is {metadata.segment_size_in_bytes} but the log has "
                    f"{received[SegmentFile.LOG]} bytes",
                )
            written_objects = True
            ranges = index_ranges({f: received[f] for f in INDEX_FILES if f in received})
            body = b"".join(bytes(indexes.get(index, b"")) for index in ranges)
            if encoder is not None and chunking is not None:
                await chunking.complete()
                log_chunks = chunking.index
                indexes_chunks, stored = await encoder.indexes(body)
                await self.objects.put(keys.indexes, stored)
                manifest = Manifest(
                    metadata,
                    log_chunks.original_size,
                    ranges,
                    encoder.transforms(log_chunks, indexes_chunks),
                )
                await self.publish(keys, manifest)
                return manifest.remote_size
            # The log and the indexes together; the manifest, which says the
            # segment is complete, only once both are there.
            log_size, _ = await asyncio.gather(
                upload.complete(), self.objects.put(keys.indexes, body)
            )
            await self.publish(keys, Manifest(metadata, log_size, ranges))
            return log_size + len(body)
        except BaseException:
            await self.discard(upload.abort, keys if written_objects else None)
            raise

    async def _discard(
        self, abort: Callable[[], Awaitable[None]], keys: SegmentKeys | None
    ) -> None:
        await abort()
        if keys is not None:
            await self.objects.delete(list(keys.all))

    def _discarded(self, task: asyncio.Task[None]) -> None:
        self._discards.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("a failed copy's cleanup failed; it may leave objects behind: %s", exc)

    # -- fetch -----------------------------------------------------------------

    async def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None
    ) -> AsyncGenerator[Chunk, None]:
        """Bytes `start`..`end` (inclusive; None or past the end = to the end) of the log.

        Chunks may be views the backend lends (see `Chunk`): copy what is kept.
        """
        last = last_fetch_position(metadata, start, end)
        attributes = {"topic": metadata.topic_id_partition.topic}
        self._metrics.add(m.STORE_FETCH_REQUESTS, 1, attributes)
        # Not the current span: a generator's context is its consumer's, and a
        # span made current across a yield would leak into it (see stream_within).
        span = _tracer.start_span("SegmentStore.fetch_log_segment", attributes=attributes)
        try:
            chunk_size = self.options.fetch_chunk_size
            keys = self.keys(metadata)
            manifest = await self._manifest(keys)
            if manifest.transforms is not None:
                chunks = await self._read_transformed(
                    keys, manifest, SegmentObjectKind.LOG, start, last
                )
            else:
                chunks = self._read(keys.log, start, last)
            if last - start >= _READ_AHEAD_CHUNKS * chunk_size:
                # Long reads overlap the backend with the consumer; a short one
                # (a Fetch) would only pay for the extra task.
                chunks = read_ahead(chunks, _READ_AHEAD_CHUNKS)
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    self._metrics.add(m.STORE_FETCH_BYTES, len(chunk), attributes)
                    yield chunk
        except Exception as exc:
            self._metrics.add(m.STORE_FETCH_ERRORS, 1, attributes)
            span.record_exception(exc)
            span.set_status(StatusCode.ERROR)
            raise
        finally:
            span.end()

    async def open_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start: int, end: int | None
    ) -> tuple[int, int]:
        """(read-only descriptor, size) of the log, for a caller on this host that reads
        bytes `start`..`end` itself (short circuit); the range is checked as a fetch's.

        UnsupportedOperationError where objects are not local files (S3).
        """
        last = last_fetch_position(metadata, start, end)
        local_files = self.local_files
        if local_files is None:
            raise UnsupportedOperationError(
                "the storage backend keeps no local files to hand out; use FetchLogSegment"
            )
        attributes = {"topic": metadata.topic_id_partition.topic}
        self._metrics.add(m.STORE_FETCH_REQUESTS, 1, attributes)
        try:
            await self._plain(self.keys(metadata), "file descriptor")
            opened = await local_files.open_descriptor(self.keys(metadata).log)
        except Exception:
            self._metrics.add(m.STORE_FETCH_ERRORS, 1, attributes)
            raise
        self._metrics.add(m.STORE_FETCH_BYTES, last - start + 1, attributes)
        return opened

    async def log_segment_url(
        self, metadata: RemoteLogSegmentMetadata, chunks_accepted: bool = False
    ) -> SegmentUrls:
        """URLs from which a caller reads the log's bytes and its indexes itself.

        The manifest says where the indexes lie (from the manifest cache, so a
        segment read again costs no request); a segment without one is
        RemoteResourceNotFoundError. A GET of a log deleted since is answered
        404, which the caller takes for SEGMENT_NOT_FOUND.
        UnsupportedOperationError where the backend cannot sign one or URLs are off;
        of this segment only where it is stored as chunks and the caller does not
        decode them (`chunks_accepted`), or they are encrypted and the data key
        would cross a channel without TLS.
        """
        keys = self.keys(metadata)
        local_files = self.local_files
        if self.options.local_fetch_urls and local_files is not None:
            # A path names no credential and does not expire; the caller asks again
            # after a while all the same, so a moved root is noticed.
            chunks = await self._url_chunks(keys, chunks_accepted)
            manifest = await self._manifest(keys)
            return SegmentUrls(
                local_files.path(keys.log).as_uri(),
                LOCAL_URL_VALID_S,
                local_files.path(keys.indexes).as_uri(),
                dict(manifest.indexes),
                chunks,
            )
        expiry_s = self.options.fetch_url_expiry_s
        presigning = self.presigning
        if not expiry_s or presigning is None:
            raise UnsupportedOperationError(
                "this segment store hands out no fetch URLs (they need the s3 backend and "
                "storage.s3.fetch.url.expiry.ms, or the filesystem backend and "
                "storage.filesystem.fetch.urls.enabled); use FetchLogSegment"
            )
        chunks = await self._url_chunks(keys, chunks_accepted)
        manifest = await self._manifest(keys)
        return SegmentUrls(
            await presigning.presigned_get_url(keys.log, expiry_s),
            expiry_s,
            await presigning.presigned_get_url(keys.indexes, expiry_s),
            dict(manifest.indexes),
            chunks,
        )

    async def _url_chunks(self, keys: SegmentKeys, chunks_accepted: bool) -> UrlChunks | None:
        """What a reader by URL needs to decode the segment: None for a plain one."""
        manifest = await self._manifest(keys)
        transforms = manifest.transforms
        if transforms is None:
            return None
        if not chunks_accepted:
            await self._plain(keys, "fetch URL")
        data_key = None
        if transforms.encryption is not None:
            if not self.options.data_keys_over_tls:
                raise UnsupportedOperationError(
                    f"{keys.base} is encrypted, and its data key goes to no caller over a "
                    "channel without TLS (tls.cert.file is unset); use FetchLogSegment",
                    metadata={SCOPE_KEY: SEGMENT_SCOPE},
                )
            transforms_options = self.options.transforms
            key_cache = transforms_options.keys if transforms_options else None
            found = await data_key_of(manifest, key_cache, keys.manifest)
            data_key = found.plaintext if found is not None else None
        return UrlChunks(transforms.log_chunks, transforms.indexes_chunks, data_key)

    async def fetch_index(
        self, metadata: RemoteLogSegmentMetadata, index: SegmentFile
    ) -> AsyncGenerator[Chunk, None]:
        if index not in INDEX_FILES:
            raise InvalidArgumentError("index_type", f"{index.value} is not an index")
        attributes = {"topic": metadata.topic_id_partition.topic}
        self._metrics.add(m.STORE_FETCH_REQUESTS, 1, attributes)
        # A follower builds its remote log aux state (Kafka's ReplicaFetcher) from a
        # segment's leader-epoch checkpoint and producer snapshot; nothing else
        # reads the first, so its reads count the builds.
        aux_state = index in AUX_STATE_FILES
        if index is SegmentFile.LEADER_EPOCH_CHECKPOINT:
            self._metrics.add(m.AUX_STATE_REQUESTS, 1, attributes)
        try:
            keys = self.keys(metadata)
            manifest = await self._manifest(keys)
            where = manifest.indexes.get(index)
            if where is None:
                raise RemoteResourceNotFoundError(
                    f"{metadata.remote_log_segment_id}: no {index.value} index"
                )
            if where.size:
                first, last = where.position, where.position + where.size - 1
                if manifest.transforms is not None:
                    chunks = await self._read_transformed(
                        keys, manifest, SegmentObjectKind.INDEXES, first, last
                    )
                else:
                    chunks = self._read(keys.indexes, first, last)
                async with contextlib.aclosing(chunks):
                    async for chunk in chunks:
                        self._metrics.add(m.STORE_FETCH_BYTES, len(chunk), attributes)
                        yield chunk
        except Exception:
            self._metrics.add(m.STORE_FETCH_ERRORS, 1, attributes)
            if aux_state:
                self._metrics.add(m.AUX_STATE_ERRORS, 1, attributes)
            raise

    async def describe_log_segment(
        self, metadata: RemoteLogSegmentMetadata
    ) -> tuple[Manifest, bytes | None]:
        """The segment's manifest as the backend holds it now (not the cache's: a caller
        checks what the bucket holds), and the custom metadata its copy returned;
        RemoteResourceNotFoundError where it has none (no whole copy)."""
        keys = self.keys(metadata)
        manifest = Manifest.from_json(await self.objects.get(keys.manifest), keys.manifest)
        limit = self.options.custom_metadata_max_bytes
        return manifest, segment_custom_metadata(manifest.remote_size, keys, limit)

    async def _manifest(self, keys: SegmentKeys) -> Manifest:
        manifest = self._manifests.get(keys.base)
        if manifest is None:
            manifest = Manifest.from_json(await self.objects.get(keys.manifest), keys.manifest)
            self._remember(keys, manifest)
        else:
            self._manifests.move_to_end(keys.base)
        return manifest

    def _remember(self, keys: SegmentKeys, manifest: Manifest) -> None:
        self._manifests[keys.base] = manifest
        self._manifests.move_to_end(keys.base)
        while len(self._manifests) > self.options.manifest_cache_entries:
            self._manifests.popitem(last=False)

    # -- delete ----------------------------------------------------------------

    async def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        keys = self.keys(metadata)
        self._manifests.pop(keys.base, None)
        with _tracer.start_as_current_span(
            "SegmentStore.delete_log_segment_data",
            attributes={"topic": metadata.topic_id_partition.topic},
        ):
            await self.objects.delete(list(keys.all))
            # A copy cut off by a killed store leaves its upload behind (a temp file, an
            # S3 multipart upload); Kafka deletes the failed copy's segment, so that
            # goes too, or nothing would ever remove it.
            async for left in self.objects.incomplete_uploads(keys.base):
                await self.objects.abort_upload(left)


def check_copy_state(metadata: RemoteLogSegmentMetadata) -> None:
    if metadata.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
        raise InvalidArgumentError(
            "metadata.state", f"must be COPY_SEGMENT_STARTED, not {metadata.state.name}"
        )


def _ended_early(file: SegmentFile, got: int, piece: FileSlice) -> InvalidArgumentError:
    return InvalidArgumentError(
        "files",
        f"the {file.value} file ended after {got} of its {piece.length} bytes "
        "(it shrank while being copied)",
    )


async def _write_slice(upload: Upload, piece: FileSlice) -> None:
    """A lent log file into the upload: copied by the kernel where the upload is a local
    file, else read in blocks (the S3 upload keeps them until sent)."""
    if isinstance(upload, LocalFileUpload):
        copied = await upload.write_file(piece.fd, piece.offset, piece.length)
        if copied < piece.length:
            raise _ended_early(SegmentFile.LOG, copied, piece)
        return
    got = 0
    while got < piece.length:
        want = min(_FILE_READ_BLOCK, piece.length - got)
        data = await asyncio.to_thread(os.pread, piece.fd, want, piece.offset + got)
        if not data:
            raise _ended_early(SegmentFile.LOG, got, piece)
        await upload.write(data)
        got += len(data)


async def _read_slice(piece: FileSlice, file: SegmentFile) -> bytes:
    """A lent index file's bytes (indexes are small: their total is capped)."""

    def read() -> bytes:
        parts, got = [], 0
        while got < piece.length:
            data = os.pread(piece.fd, piece.length - got, piece.offset + got)
            if not data:
                raise _ended_early(file, got, piece)
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    return await asyncio.to_thread(read)
