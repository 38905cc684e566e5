"""Copies whose bytes never cross the segment store's gRPC stream.

By path: a store on the broker's host, allowed to read its log directories,
opens the segment's files itself, and the filesystem backend has the kernel
copy them (copy_file_range), as the short circuit does with lent descriptors.

By URL: the caller plans the log's parts and states each one's MD5 and the
indexes'; the store starts a multipart upload of the log (S3's; GCS: part objects
it composes; Azure: blocks it commits) and hands it a signed PUT per part and one
of the indexes object, each signing its MD5 (Content-MD5) where the cloud can (S3,
GCS), so the object store takes those bytes and no others. An ETag is
not an MD5 on an SSE-KMS or SSE-C bucket: nothing checks one. Completing checks
that every part and the indexes are there at their sizes, then completes the
upload and writes the manifest last, as every copy does. A copy that never
completes leaves an incomplete upload and at most an indexes object without a
manifest: the segment's deletion (Kafka deletes a failed copy's segment) and a
scrub remove both.

Where the store compresses or encrypts new segments, a URL copy's caller asks
first how (PrepareSegmentUpload: the chunk size, the compression, a fresh data key
over TLS), encodes the chunks itself as the store would, and plans and PUTs the
stored chunks; it states each chunk's stored size, from which completing writes a
version-2 manifest.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import re
import stat
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from remotelog.core.errors import (
    InvalidArgumentError,
    RemoteResourceNotFoundError,
    UnsupportedOperationError,
)
from remotelog.core.model import RemoteLogSegmentMetadata, SegmentFile
from remotelog.segmentstore.backend import IncompleteUpload, StoredPart, UploadSigningStore
from remotelog.segmentstore.key_providers import KeyNotFoundError, UnwrappedKeys
from remotelog.segmentstore.layout import (
    INDEX_FILES,
    REQUIRED_FILES,
    Manifest,
    SegmentKeys,
    SegmentTransforms,
    WrappedDataKey,
)
from remotelog.segmentstore.layout import index_ranges as ranges_of
from remotelog.segmentstore.store import FileSlice, SegmentChunk, SegmentStore, check_copy_state
from remotelog.segmentstore.transformed import ZSTD
from remotelog.transforms.chunks import (
    MAX_CHUNK_SIZE,
    MIN_CHUNK_SIZE,
    NONCE_BYTES,
    TAG_BYTES,
    ChunkIndex,
    DataKey,
)

T = TypeVar("T")
# Upload URLs outlive the copy's own timeout by this much: a part sent just
# before the deadline still lands.
UPLOAD_URL_MARGIN_S = 60
MAX_COPY_TIMEOUT_S = 24 * 3600
# S3's most parts of one upload.
MAX_PARTS = 10_000
_MD5 = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class SentPart:
    """A part of the log as the caller plans to PUT it, and PUT it."""

    number: int
    size: int
    md5: str  # lowercase hex


@dataclass(frozen=True, slots=True)
class PlannedPart:
    """A part of the log to PUT: `size` bytes from `position`, to `url`."""

    number: int
    position: int
    size: int
    url: str


@dataclass(frozen=True, slots=True)
class SegmentUpload:
    """Where a caller PUTs a segment (StartSegmentUpload)."""

    upload_id: str
    log_parts: tuple[PlannedPart, ...]
    indexes_url: str
    index_order: tuple[SegmentFile, ...]
    valid_for_s: int
    # What the indexes' PUT sends besides its Content-MD5: signed into its URL.
    indexes_headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class UploadTransforms:
    """How the caller of a URL copy encodes the segment's chunks (PrepareSegmentUpload)."""

    chunk_size: int
    compression_level: int | None  # None: not compressed
    compression_heuristic: bool
    data_key: DataKey | None  # None: not encrypted


@dataclass(frozen=True, slots=True)
class UploadedChunks:
    """A segment its caller PUT as chunks: each stored chunk's size, and its data key
    wrapped as the manifest keeps it."""

    chunk_size: int
    log_stored_sizes: tuple[int, ...]
    indexes_stored_sizes: tuple[int, ...]
    compressed: bool
    wrapped_data_key: WrappedDataKey | None

    def indexes(self, sizes: dict[SegmentFile, int]) -> tuple[ChunkIndex, ChunkIndex]:
        """The log's and the indexes object's chunk indexes, for their original `sizes`;
        InvalidArgumentError for chunks no encoding makes."""
        if not MIN_CHUNK_SIZE <= self.chunk_size <= MAX_CHUNK_SIZE:
            raise InvalidArgumentError(
                "chunks.chunk_size",
                f"{self.chunk_size} is not from {MIN_CHUNK_SIZE} to {MAX_CHUNK_SIZE}",
            )
        # A stored chunk is its flag and payload (never longer than the original),
        # with a nonce and tag where it is encrypted.
        overhead = 1 + (NONCE_BYTES + TAG_BYTES if self.wrapped_data_key else 0)
        index_bytes = sum(size for file, size in sizes.items() if file is not SegmentFile.LOG)
        found = []
        for field, original, stored in (
            ("chunks.log_stored_sizes", sizes[SegmentFile.LOG], self.log_stored_sizes),
            ("chunks.indexes_stored_sizes", index_bytes, self.indexes_stored_sizes),
        ):
            try:
                index = ChunkIndex(self.chunk_size, original, stored)
            except ValueError as exc:
                raise InvalidArgumentError(field, str(exc)) from None
            for number, size in enumerate(stored):
                if not overhead <= size <= index.original_size_of(number) + overhead:
                    raise InvalidArgumentError(
                        field, f"chunk {number}: {size} stored bytes, which no encoding makes"
                    )
            found.append(index)
        return found[0], found[1]


@dataclass(frozen=True, slots=True)
class LocalFile:
    """One of a segment's files on the store's host: `size` bytes at `path`."""

    path: str
    size: int


def allowed_roots(paths: str) -> tuple[Path, ...]:
    """The directories of a comma-separated `copy.paths.allowed`, as given (normalised)."""
    return tuple(Path(os.path.normpath(p.strip())) for p in paths.split(",") if p.strip())


# Kafka's internal topics, and KRaft's metadata log (its directory is
# __cluster_metadata-0): their records (offsets, transactions, SCRAM credentials,
# delegation tokens) are no segment to tier.
INTERNAL_TOPICS = frozenset(
    {
        "__consumer_offsets",
        "__transaction_state",
        "__share_group_state",
        "__remote_log_metadata",
        "__cluster_metadata",
    }
)
# The name Kafka gives each of a segment's files: its base offset, 20 digits.
SUFFIXES = {
    SegmentFile.LOG: ".log",
    SegmentFile.OFFSET_INDEX: ".index",
    SegmentFile.TIME_INDEX: ".timeindex",
    SegmentFile.TRANSACTION_INDEX: ".txnindex",
    SegmentFile.PRODUCER_SNAPSHOT: ".snapshot",
}
_OFFSET_NAME = re.compile(r"(\d{20})(\.[a-z]+)")


def expected_place(
    metadata: RemoteLogSegmentMetadata, file: SegmentFile, path: str, roots: tuple[Path, ...]
) -> tuple[Path, str, str]:
    """(allowed root, partition directory, file name) of a file Kafka wrote for this
    segment: `<root>/<topic>-<partition>/<20-digit offset><suffix>`, its offset the
    segment's start (a producer snapshot's: from its start to the offset after its
    end, where Kafka names it after the next segment)."""
    given = Path(path)
    if not given.is_absolute():
        raise InvalidArgumentError("files.path", f"the {file.value} file's path is relative")
    if os.path.normpath(path) != path:
        raise InvalidArgumentError("files.path", f"{path} ({file.value}) is not a normal path")
    root = given.parent.parent
    if root not in roots:
        raise InvalidArgumentError(
            "files.path",
            f"{path} ({file.value}) is not in a partition directory of copy.paths.allowed",
        )
    tp = metadata.remote_log_segment_id.topic_id_partition
    directory = f"{tp.topic}-{tp.partition}"
    named = _OFFSET_NAME.fullmatch(given.name)
    offset = int(named[1]) if named else -1
    if file is SegmentFile.PRODUCER_SNAPSHOT:
        fits = metadata.start_offset <= offset <= metadata.end_offset + 1
    else:
        fits = offset == metadata.start_offset
    if given.parent.name != directory or not named or named[2] != SUFFIXES[file] or not fits:
        raise InvalidArgumentError(
            "files.path",
            f"{path} ({file.value}) is not a file Kafka wrote for this segment: "
            f"{directory}/{metadata.start_offset:020d}{SUFFIXES[file]}",
        )
    return root, directory, given.name


def check_plan(parts: list[SentPart], log_size: int, min_part_size: int) -> None:
    """The parts a caller plans: numbered from 1 in order, each with a hex MD5, every
    one but the last at least `min_part_size`, at most MAX_PARTS, the log whole."""
    if len(parts) > MAX_PARTS:
        raise InvalidArgumentError("log_parts", f"{len(parts)} parts, more than {MAX_PARTS}")
    _check_sent(parts, log_size)
    for part in parts[:-1]:
        if part.size < min_part_size:
            raise InvalidArgumentError(
                "log_parts.size",
                f"part {part.number} has {part.size} bytes: every part but the last needs "
                f"{min_part_size}",
            )


def check_sizes(
    metadata: RemoteLogSegmentMetadata, sizes: dict[SegmentFile, int], max_index_bytes: int
) -> None:
    missing = sorted(f.value for f in REQUIRED_FILES - sizes.keys())
    if missing:
        raise InvalidArgumentError("files", f"missing files: {', '.join(missing)}")
    for file, size in sizes.items():
        if size < 0:
            raise InvalidArgumentError("files", f"the {file.value} file's size {size} is negative")
    if sizes[SegmentFile.LOG] != metadata.segment_size_in_bytes:
        raise InvalidArgumentError(
            "metadata.segment_size_in_bytes",
            f"is {metadata.segment_size_in_bytes} but the log has {sizes[SegmentFile.LOG]} bytes",
        )
    if sum(sizes.values()) - sizes[SegmentFile.LOG] > max_index_bytes:
        raise InvalidArgumentError("files", f"indexes exceed {max_index_bytes} bytes")


def sizes_of(files: Iterable[tuple[SegmentFile, T]], field: str) -> dict[SegmentFile, T]:
    """By file, refusing one named twice."""
    sizes: dict[SegmentFile, T] = {}
    for file, size in files:
        if file in sizes:
            raise InvalidArgumentError(field, f"the {file.value} file is named twice")
        sizes[file] = size
    return sizes


def _close_all(opened: dict[SegmentFile, FileSlice | bytes]) -> None:
    for piece in opened.values():
        if isinstance(piece, FileSlice):
            os.close(piece.fd)


def _close_when_opened(opening: asyncio.Future[dict[SegmentFile, FileSlice | bytes]]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        _close_all(opening.result())


class DirectCopies:
    """Copies by path and by URL into `store`."""

    def __init__(
        self,
        store: SegmentStore,
        *,
        allowed_paths: tuple[Path, ...] = (),
        upload_urls: bool = False,
        abort_uploads_after_s: float = 0.0,
    ) -> None:
        self.store = store
        self.allowed_paths = allowed_paths
        self.upload_urls = upload_urls
        # 0: uploads are never aborted for their age (AbandonedUploads).
        self.abort_uploads_after_s = abort_uploads_after_s

    def _keys_for(self, chunks: UploadedChunks | None) -> UnwrappedKeys | None:
        """The keys that open `chunks`' data key (None: not encrypted).
        UnsupportedOperationError for plain bytes where new segments are chunked (a
        caller that did not ask PrepareSegmentUpload takes the stream);
        InvalidArgumentError for encrypted chunks where this store has no key provider."""
        if chunks is None and self.store.transforms_new_segments:
            raise UnsupportedOperationError(
                "this store compresses or encrypts new segments (compression.enabled, "
                "encryption.key.provider): it copies them by URL only as chunks the caller "
                "encodes (PrepareSegmentUpload), or by CopyLogSegmentData"
            )
        if chunks is None or chunks.wrapped_data_key is None:
            return None
        transforms = self.store.options.transforms
        keys = transforms.keys if transforms is not None else None
        if keys is None:
            raise InvalidArgumentError(
                "chunks.wrapped_data_key", "this store has no key provider to open it"
            )
        return keys

    # -- by path ---------------------------------------------------------------

    async def copy_files(
        self,
        metadata: RemoteLogSegmentMetadata,
        files: dict[SegmentFile, LocalFile],
        inline: dict[SegmentFile, bytes],
    ) -> bytes | None:
        """Store the segment from its files on this host, and `inline` ones sent whole
        (through the store's copy, so chunked, compressed and encrypted as a stream's)."""
        if not self.allowed_paths:
            raise UnsupportedOperationError(
                "copy.paths.allowed is empty: this store reads no broker's files "
                "(use CopyLogSegmentData)"
            )
        check_copy_state(metadata)
        topic = metadata.remote_log_segment_id.topic_id_partition.topic
        if topic in INTERNAL_TOPICS:
            raise InvalidArgumentError("metadata.topic", f"{topic} is Kafka's own: never tiered")
        both = sorted(f.value for f in files.keys() & inline.keys())
        if both:
            raise InvalidArgumentError("inline_files", f"also named by path: {', '.join(both)}")
        index_bytes = sum(f.size for k, f in files.items() if k is not SegmentFile.LOG)
        index_bytes += sum(len(data) for data in inline.values())
        if index_bytes > self.store.options.max_index_bytes:
            raise InvalidArgumentError(
                "files", f"indexes exceed {self.store.options.max_index_bytes} bytes"
            )
        places = {
            file: expected_place(metadata, file, local.path, self.allowed_paths)
            for file, local in files.items()
        }
        opening = asyncio.ensure_future(asyncio.to_thread(self._open_all, files, places))
        try:
            opened = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # The thread goes on opening: what it opens is closed when it is done.
            opening.add_done_callback(_close_when_opened)
            raise
        try:

            async def chunks() -> AsyncIterator[SegmentChunk]:
                for file, piece in opened.items():
                    yield SegmentChunk(file, 0, piece)
                for file, data in inline.items():
                    yield SegmentChunk(file, 0, data)

            return await self.store.copy_log_segment_data(metadata, chunks())
        finally:
            _close_all(opened)

    def _open_all(
        self, files: dict[SegmentFile, LocalFile], places: dict[SegmentFile, tuple[Path, str, str]]
    ) -> dict[SegmentFile, FileSlice | bytes]:
        """In one thread hop: the log as a slice of its opened file, the indexes (small)
        read whole."""
        opened: dict[SegmentFile, FileSlice | bytes] = {}
        try:
            for file, local in files.items():
                fd = _open_beneath(file, local, *places[file])
                if file is SegmentFile.LOG:
                    opened[file] = FileSlice(fd, 0, local.size)
                    continue
                try:
                    opened[file] = _read_exactly(fd, local.size, file)
                finally:
                    os.close(fd)
        except BaseException:
            _close_all(opened)
            raise
        return opened

    # -- by URL ----------------------------------------------------------------

    def _signer(self) -> UploadSigningStore:
        objects = self.store.upload_signing
        if not self.upload_urls or objects is None:
            raise UnsupportedOperationError(
                "this store hands out no upload URLs (storage.s3.copy.urls.enabled, object "
                "stores only): "
                "use CopyLogSegmentData"
            )
        return objects

    async def prepare_upload(self, metadata: RemoteLogSegmentMetadata) -> UploadTransforms | None:
        """How the caller encodes this segment before it plans its parts (None: as it is),
        with a fresh data key where the store encrypts: given only over TLS."""
        self._signer()
        check_copy_state(metadata)
        options = self.store.options.transforms
        if options is None or not options.transforms_new_segments:
            return None
        data_key = None
        if options.encrypt:
            if not self.store.options.data_keys_over_tls:
                raise UnsupportedOperationError(
                    "this store encrypts new segments, and hands their data keys to no "
                    "caller over a channel without TLS (tls.cert.file is unset): use "
                    "CopyLogSegmentData"
                )
            assert options.keys is not None
            data_key = await options.keys.new_data_key()
        return UploadTransforms(
            options.chunk_size, options.compression_level, options.compression_heuristic, data_key
        )

    async def start_upload(
        self,
        metadata: RemoteLogSegmentMetadata,
        sizes: dict[SegmentFile, int],
        copy_timeout_s: float,
        planned: list[SentPart],
        indexes_md5: str,
        chunks: UploadedChunks | None = None,
    ) -> SegmentUpload:
        self._keys_for(chunks)
        signer = self._signer()
        if not planned:
            # A caller older than signed MD5s: its URLs could write other bytes.
            raise UnsupportedOperationError(
                "this store signs only uploads whose parts' MD5s are stated up front "
                "(log_parts): use CopyLogSegmentData, or a plugin that states them"
            )
        check_copy_state(metadata)
        check_sizes(metadata, sizes, self.store.options.max_index_bytes)
        stored_log = sizes[SegmentFile.LOG]
        if chunks is not None:
            stored_log = chunks.indexes(sizes)[0].stored_size
        check_plan(planned, stored_log, signer.min_part_size)
        _check_md5("indexes_md5", indexes_md5)
        if not 0 < copy_timeout_s <= MAX_COPY_TIMEOUT_S:
            raise InvalidArgumentError(
                "copy_timeout_ms", f"must be from 1 to {MAX_COPY_TIMEOUT_S * 1000}"
            )
        if self.abort_uploads_after_s and copy_timeout_s >= self.abort_uploads_after_s:
            # The store would abort the upload while the broker still PUTs its parts.
            raise InvalidArgumentError(
                "copy_timeout_ms",
                f"must be below this store's incomplete.uploads.abort.after.ms "
                f"({self.abort_uploads_after_s * 1000:.0f}): lower the plugin's "
                "client.copy.timeout.ms or raise that",
            )
        keys = self.store.keys(metadata)
        expires_s = math.ceil(copy_timeout_s) + UPLOAD_URL_MARGIN_S
        upload_id = await signer.start_multipart(keys.log)
        urls = await asyncio.gather(
            signer.presigned_put_url(keys.indexes, expires_s, indexes_md5),
            *(
                signer.presigned_part_url(keys.log, upload_id, part.number, expires_s, part.md5)
                for part in planned
            ),
        )
        positions = itertools.accumulate((p.size for p in planned), initial=0)
        parts = tuple(
            PlannedPart(part.number, position, part.size, url)
            for part, position, url in zip(planned, positions, urls[1:], strict=False)
        )
        order = tuple(f for f in INDEX_FILES if f in sizes)
        return SegmentUpload(upload_id, parts, urls[0], order, expires_s, signer.signed_put_headers)

    async def complete_upload(
        self,
        metadata: RemoteLogSegmentMetadata,
        upload_id: str,
        sizes: dict[SegmentFile, int],
        parts: list[SentPart],
        chunks: UploadedChunks | None = None,
    ) -> bytes | None:
        """Check what arrived, complete the upload and write the manifest; the segment's
        custom metadata. Any failure discards the upload."""
        signer = self._signer()

        async def complete(keys: SegmentKeys) -> int:
            try:
                keys_of_chunks = self._keys_for(chunks)
                check_sizes(metadata, sizes, self.store.options.max_index_bytes)
                ranges = ranges_of({f: sizes[f] for f in INDEX_FILES if f in sizes})
                manifest = Manifest(metadata, sizes[SegmentFile.LOG], ranges)
                if chunks is not None:
                    manifest = await _chunked_manifest(manifest, sizes, chunks, keys_of_chunks)
                stored_sizes = _stored_sizes(manifest)
                _check_sent(parts, stored_sizes[0])
                stored = await self._check_arrived(signer, keys, upload_id, stored_sizes[1], parts)
                await signer.complete_multipart(keys.log, upload_id, stored)
                await self.store.publish(keys, manifest)
            except BaseException:
                await self.store.discard(lambda: _abort(signer, keys, upload_id), keys)
                raise
            return manifest.remote_size

        return await self.store.recorded_copy(metadata, "complete_segment_upload", complete)

    async def _check_arrived(
        self,
        signer: UploadSigningStore,
        keys: SegmentKeys,
        upload_id: str,
        index_bytes: int,
        parts: list[SentPart],
    ) -> list[StoredPart]:
        """The parts as the bucket holds them (S3's ETags, GCS's part objects, Azure's
        block ids: what completes the upload), once each is there at its size. Their
        bytes are the MD5s' the caller sent: nothing compares an ETag, which is no MD5
        on an encrypted bucket."""
        try:
            stored = await signer.uploaded_parts(keys.log, upload_id)
        except RemoteResourceNotFoundError:
            raise InvalidArgumentError(
                "upload_id", "names no upload of this segment under way (aborted, or completed)"
            ) from None
        held = {p.number: p for p in stored}
        arrived = []
        for sent in parts:
            got = held.pop(sent.number, None)
            if got is None or got.size != sent.size:
                found = "nothing" if got is None else f"{got.size} bytes"
                raise InvalidArgumentError(
                    "log_parts",
                    f"part {sent.number} was sent as {sent.size} bytes, "
                    f"but the bucket holds {found}",
                )
            arrived.append(got)
        if held:
            raise InvalidArgumentError(
                "log_parts", f"the bucket holds parts not sent: {sorted(held)}"
            )
        try:
            indexes = await signer.head(keys.indexes)
        except RemoteResourceNotFoundError:
            raise InvalidArgumentError("files", "the indexes object was never PUT") from None
        if indexes.size != index_bytes:
            raise InvalidArgumentError(
                "files",
                f"the indexes were sent as {index_bytes} bytes, "
                f"but the bucket holds {indexes.size}",
            )
        return arrived

    async def abort_upload(self, metadata: RemoteLogSegmentMetadata, upload_id: str) -> None:
        signer = self._signer()
        keys = self.store.keys(metadata)
        await self.store.discard(lambda: _abort(signer, keys, upload_id), keys)


def _open_beneath(
    file: SegmentFile, local: LocalFile, root: Path, directory: str, name: str
) -> int:
    """A read-only descriptor of `root/directory/name`, opened one component at a time
    without following a symlink below the root (openat2's RESOLVE_BENEATH and
    RESOLVE_NO_SYMLINKS), once it is a regular file of at least its stated size."""
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        below = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        fds.append(os.open(directory, below | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open(name, below | os.O_NONBLOCK, dir_fd=fds[-1])
    except OSError as exc:
        raise InvalidArgumentError(
            "files.path", f"cannot read {local.path} ({file.value}): {exc.strerror}"
        ) from None
    finally:
        for opened in fds:
            os.close(opened)
    status = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(status.st_mode):
        problem = "is not a regular file"
    elif status.st_size < local.size:
        problem = f"has {status.st_size} bytes, fewer than its stated {local.size}"
    if problem is not None:
        os.close(fd)
        raise InvalidArgumentError("files.size", f"{local.path} ({file.value}) {problem}")
    return fd


def _read_exactly(fd: int, size: int, file: SegmentFile) -> bytes:
    parts, got = [], 0
    while got < size:
        data = os.pread(fd, size - got, got)
        if not data:
            raise InvalidArgumentError(
                "files.size", f"the {file.value} file ended after {got} of its {size} bytes"
            )
        parts.append(data)
        got += len(data)
    return b"".join(parts)


async def _chunked_manifest(
    plain: Manifest,
    sizes: dict[SegmentFile, int],
    chunks: UploadedChunks,
    keys: UnwrappedKeys | None,
) -> Manifest:
    """The version-2 manifest of chunks PUT by the caller, once its wrapped data key
    opens with `keys` (a copy no read could open is no copy)."""
    log, indexes = chunks.indexes(sizes)
    wrapped = chunks.wrapped_data_key
    if wrapped is not None and keys is not None:
        try:
            await keys.plaintext(wrapped)
        except KeyNotFoundError as exc:
            raise InvalidArgumentError("chunks.wrapped_data_key", str(exc)) from None
    compression = ZSTD if chunks.compressed else None
    return Manifest(
        plain.metadata,
        plain.log_size,
        plain.indexes,
        SegmentTransforms(log, indexes, compression, wrapped),
    )


def _stored_sizes(manifest: Manifest) -> tuple[int, int]:
    """The bytes of the segment's log object and of its indexes object."""
    if manifest.transforms is not None:
        t = manifest.transforms
        return t.log_chunks.stored_size, t.indexes_chunks.stored_size
    return manifest.log_size, sum(r.size for r in manifest.indexes.values())


def _check_sent(parts: list[SentPart], log_size: int) -> None:
    """The parts the caller says it sends: numbered from 1 in order, the log whole."""
    if not parts:
        raise InvalidArgumentError("log_parts", "no parts")
    for expected, part in enumerate(parts, 1):
        if part.number != expected:
            raise InvalidArgumentError(
                "log_parts", f"part {part.number} where part {expected} belongs"
            )
        if part.size < 0:
            raise InvalidArgumentError("log_parts.size", f"part {part.number}: negative")
        _check_md5("log_parts.md5", part.md5, f"part {part.number}: ")
    if sum(p.size for p in parts) != log_size:
        raise InvalidArgumentError(
            "log_parts", f"the parts hold {sum(p.size for p in parts)} bytes, the log {log_size}"
        )


def _check_md5(field: str, md5: str, what: str = "") -> None:
    if not _MD5.fullmatch(md5):
        raise InvalidArgumentError(field, f"{what}not a lowercase hex MD5")


async def _abort(signer: UploadSigningStore, keys: SegmentKeys, upload_id: str) -> None:
    await signer.abort_upload(IncompleteUpload(keys.log, upload_id, 0.0))
