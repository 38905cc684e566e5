"""Copies whose bytes never cross the segment store's gRPC stream.

By path: a store on the broker's host, allowed to read its log directories,
opens the segment's files itself, and the filesystem backend has the kernel
copy them (copy_file_range), as the short circuit does with lent descriptors.

By URL: the store starts an S3 multipart upload of the log and hands the caller
a presigned PUT per part and one of the indexes object; the caller PUTs the
bytes itself. Completing checks what arrived against what the caller says it
sent (each part's size and MD5, the indexes' size and MD5), then completes the
upload and writes the manifest last, as every copy does. A copy that never
completes leaves an incomplete upload and at most an indexes object without a
manifest: the segment's deletion (Kafka deletes a failed copy's segment) and a
scrub remove both.
"""

from __future__ import annotations

import asyncio
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
from remotelog.segmentstore.layout import INDEX_FILES, REQUIRED_FILES, Manifest, SegmentKeys
from remotelog.segmentstore.layout import index_ranges as ranges_of
from remotelog.segmentstore.store import FileSlice, SegmentChunk, SegmentStore, check_copy_state

T = TypeVar("T")
# Upload URLs outlive the copy's own timeout by this much: a part sent just
# before the deadline still lands.
UPLOAD_URL_MARGIN_S = 60
MAX_COPY_TIMEOUT_S = 24 * 3600
# S3's most parts of one upload.
MAX_PARTS = 10_000
_MD5 = re.compile(r"[0-9a-f]{32}")


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


@dataclass(frozen=True, slots=True)
class LocalFile:
    """One of a segment's files on the store's host: `size` bytes at `path`."""

    path: str
    size: int


def allowed_roots(paths: str) -> tuple[Path, ...]:
    """The directories of a comma-separated `copy.paths.allowed`, resolved."""
    return tuple(Path(p.strip()).resolve() for p in paths.split(",") if p.strip())


def part_plan(size: int, part_size: int) -> list[tuple[int, int]]:
    """(position, size) of each part of a log of `size` bytes: `part_size` each, larger
    where S3's 10,000 parts would not hold it; one (empty) part for an empty log."""
    part_size = max(part_size, math.ceil(size / MAX_PARTS))
    return [(p, min(part_size, size - p)) for p in range(0, size, part_size)] or [(0, 0)]


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
        part_size: int = 25 * 1024 * 1024,
        abort_uploads_after_s: float = 0.0,
    ) -> None:
        self.store = store
        self.allowed_paths = allowed_paths
        self.upload_urls = upload_urls
        self.part_size = part_size
        # 0: uploads are never aborted for their age (AbandonedUploads).
        self.abort_uploads_after_s = abort_uploads_after_s

    # -- by path ---------------------------------------------------------------

    async def copy_files(
        self,
        metadata: RemoteLogSegmentMetadata,
        files: dict[SegmentFile, LocalFile],
        inline: dict[SegmentFile, bytes],
    ) -> bytes | None:
        """Store the segment from its files on this host, and `inline` ones sent whole."""
        if not self.allowed_paths:
            raise UnsupportedOperationError(
                "copy.paths.allowed is empty: this store reads no broker's files "
                "(use CopyLogSegmentData)"
            )
        check_copy_state(metadata)
        both = sorted(f.value for f in files.keys() & inline.keys())
        if both:
            raise InvalidArgumentError("inline_files", f"also named by path: {', '.join(both)}")
        index_bytes = sum(f.size for k, f in files.items() if k is not SegmentFile.LOG)
        index_bytes += sum(len(data) for data in inline.values())
        if index_bytes > self.store.options.max_index_bytes:
            raise InvalidArgumentError(
                "files", f"indexes exceed {self.store.options.max_index_bytes} bytes"
            )
        opening = asyncio.ensure_future(asyncio.to_thread(self._open_all, files))
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
        self, files: dict[SegmentFile, LocalFile]
    ) -> dict[SegmentFile, FileSlice | bytes]:
        """In one thread hop: the log as a slice of its opened file, the indexes (small)
        read whole."""
        opened: dict[SegmentFile, FileSlice | bytes] = {}
        try:
            for file, local in files.items():
                fd = self._open(file, local)
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

    def _open(self, file: SegmentFile, local: LocalFile) -> int:
        """A read-only descriptor of the file, once it is known to be one this store may
        read and to hold at least its stated size."""
        path = Path(local.path)
        if not path.is_absolute():
            raise InvalidArgumentError("files.path", f"the {file.value} file's path is relative")
        resolved = path.resolve()
        if not any(resolved.is_relative_to(root) for root in self.allowed_paths):
            raise InvalidArgumentError(
                "files.path",
                f"{local.path} ({file.value}) is outside copy.paths.allowed",
            )
        try:
            fd = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise InvalidArgumentError(
                "files.path", f"cannot read {local.path} ({file.value}): {exc.strerror}"
            ) from None
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

    # -- by URL ----------------------------------------------------------------

    def _signer(self) -> UploadSigningStore:
        objects = self.store.upload_signing
        if not self.upload_urls or objects is None:
            raise UnsupportedOperationError(
                "this store hands out no upload URLs (storage.s3.copy.urls.enabled, S3 only): "
                "use CopyLogSegmentData"
            )
        return objects

    async def start_upload(
        self,
        metadata: RemoteLogSegmentMetadata,
        sizes: dict[SegmentFile, int],
        copy_timeout_s: float,
    ) -> SegmentUpload:
        signer = self._signer()
        check_copy_state(metadata)
        check_sizes(metadata, sizes, self.store.options.max_index_bytes)
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
        plan = part_plan(sizes[SegmentFile.LOG], max(self.part_size, signer.min_part_size))
        urls = await asyncio.gather(
            signer.presigned_put_url(keys.indexes, expires_s),
            *(
                signer.presigned_part_url(keys.log, upload_id, number, expires_s)
                for number in range(1, len(plan) + 1)
            ),
        )
        parts = tuple(
            PlannedPart(number, position, size, url)
            for number, ((position, size), url) in enumerate(zip(plan, urls[1:], strict=True), 1)
        )
        order = tuple(f for f in INDEX_FILES if f in sizes)
        return SegmentUpload(upload_id, parts, urls[0], order, expires_s)

    async def complete_upload(
        self,
        metadata: RemoteLogSegmentMetadata,
        upload_id: str,
        sizes: dict[SegmentFile, int],
        parts: list[StoredPart],
        indexes_md5: str,
    ) -> bytes | None:
        """Check what arrived, complete the upload and write the manifest; the segment's
        custom metadata. Any failure discards the upload."""
        signer = self._signer()

        async def complete(keys: SegmentKeys) -> int:
            try:
                check_sizes(metadata, sizes, self.store.options.max_index_bytes)
                _check_sent(parts, indexes_md5, sizes[SegmentFile.LOG])
                await self._check_arrived(signer, keys, upload_id, sizes, parts, indexes_md5)
                await signer.complete_multipart(keys.log, upload_id, parts)
                ranges = ranges_of({f: sizes[f] for f in INDEX_FILES if f in sizes})
                await self.store.publish(keys, Manifest(metadata, sizes[SegmentFile.LOG], ranges))
            except BaseException:
                await self.store.discard(lambda: _abort(signer, keys, upload_id), keys)
                raise
            return sum(sizes.values())

        return await self.store.recorded_copy(metadata, "complete_segment_upload", complete)

    async def _check_arrived(
        self,
        signer: UploadSigningStore,
        keys: SegmentKeys,
        upload_id: str,
        sizes: dict[SegmentFile, int],
        parts: list[StoredPart],
        indexes_md5: str,
    ) -> None:
        try:
            stored = await signer.uploaded_parts(keys.log, upload_id)
        except RemoteResourceNotFoundError:
            raise InvalidArgumentError(
                "upload_id", "names no upload of this segment under way (aborted, or completed)"
            ) from None
        held = {p.number: p for p in stored}
        for sent in parts:
            got = held.pop(sent.number, None)
            if got != sent:
                found = "nothing" if got is None else f"{got.size} bytes of MD5 {got.md5}"
                raise InvalidArgumentError(
                    "log_parts",
                    f"part {sent.number} was sent as {sent.size} bytes of MD5 {sent.md5}, "
                    f"but S3 holds {found}",
                )
        if held:
            raise InvalidArgumentError("log_parts", f"S3 holds parts not sent: {sorted(held)}")
        index_bytes = sum(sizes.values()) - sizes[SegmentFile.LOG]
        try:
            indexes = await signer.head(keys.indexes)
        except RemoteResourceNotFoundError:
            raise InvalidArgumentError("indexes_md5", "the indexes object was never PUT") from None
        if (indexes.size, indexes.md5) != (index_bytes, indexes_md5):
            raise InvalidArgumentError(
                "indexes_md5",
                f"the indexes were sent as {index_bytes} bytes of MD5 {indexes_md5}, but S3 "
                f"holds {indexes.size} bytes of MD5 {indexes.md5}",
            )

    async def abort_upload(self, metadata: RemoteLogSegmentMetadata, upload_id: str) -> None:
        signer = self._signer()
        keys = self.store.keys(metadata)
        await self.store.discard(lambda: _abort(signer, keys, upload_id), keys)


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


def _check_sent(parts: list[StoredPart], indexes_md5: str, log_size: int) -> None:
    """The parts the caller says it sent: numbered from 1 in order, the log whole."""
    if not parts:
        raise InvalidArgumentError("log_parts", "no parts")
    for expected, part in enumerate(parts, 1):
        if part.number != expected:
            raise InvalidArgumentError(
                "log_parts", f"part {part.number} where part {expected} belongs"
            )
        if not _MD5.fullmatch(part.md5):
            raise InvalidArgumentError("log_parts.md5", f"part {part.number}: not a hex MD5")
    if sum(p.size for p in parts) != log_size:
        raise InvalidArgumentError(
            "log_parts", f"the parts hold {sum(p.size for p in parts)} bytes, the log {log_size}"
        )
    if not _MD5.fullmatch(indexes_md5):
        raise InvalidArgumentError("indexes_md5", "not a hex MD5")


async def _abort(signer: UploadSigningStore, keys: SegmentKeys, upload_id: str) -> None:
    await signer.abort_upload(IncompleteUpload(keys.log, upload_id, 0.0))
