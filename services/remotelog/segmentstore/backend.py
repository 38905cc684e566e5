"""The object-store contract the segment store runs on; filesystem and S3 implement it.

Object semantics as in S3: a key names immutable bytes, visible in full or not
at all. An upload streams parts and becomes visible only at `complete()`;
`abort()` (or a failure) leaves nothing under the key.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

# A chunk a read yields: bytes, or a read-only view the backend lends (the
# filesystem's mapped pages), valid for as long as the view is held.
Chunk = bytes | memoryview


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    last_modified_s: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class IncompleteUpload:
    """An upload that never completed: an S3 multipart upload, a filesystem temp file."""

    key: str
    upload_id: str
    initiated_s: float  # epoch seconds


class Upload(Protocol):
    """One object being written; bytes arrive in order."""

    async def write(self, data: Chunk) -> None:
        """Add `data`; it may be kept uncopied until written or sent, so it must not change."""
        ...

    async def complete(self) -> int:
        """Make the object visible under its key; returns its size."""
        ...

    async def abort(self) -> None:
        """Drop everything written; idempotent, and safe after a failed write."""
        ...


@runtime_checkable
class LocalFileUpload(Upload, Protocol):
    """An upload into a local file, which can take bytes straight from another file."""

    async def write_file(self, fd: int, offset: int, length: int) -> int:
        """Add `length` bytes of `fd` from `offset`, copied by the kernel; returns how
        many there were (fewer if the file ended first)."""
        ...


class ObjectStore(Protocol):
    """What the segment store needs from a backend.

    Missing objects raise RemoteResourceNotFoundError; transient faults that
    outlived the caller's deadline RetriableRemoteStorageError; anything else
    RemoteStorageError.
    """

    def open_upload(self, key: str) -> Upload: ...

    async def put(self, key: str, data: bytes) -> None: ...

    def read(
        self, key: str, start: int, end: int | None, chunk_size: int
    ) -> AsyncGenerator[Chunk, None]:
        """Bytes `start`..`end` (inclusive; None = to the end) in chunks of `chunk_size`."""
        ...

    async def get(self, key: str) -> bytes: ...

    async def delete(self, keys: list[str]) -> None:
        """Delete `keys` in order; keys already gone are not an error."""
        ...

    def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        """Every complete object under `prefix`, sorted by key."""
        ...

    def incomplete_uploads(self, prefix: str) -> AsyncIterator[IncompleteUpload]:
        """Uploads under `prefix` that were started and neither completed nor aborted."""
        ...

    async def abort_upload(self, upload: IncompleteUpload) -> None:
        """Drop what an incomplete upload wrote; idempotent."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class LocalFileStore(ObjectStore, Protocol):
    """A backend whose objects are local files (filesystem): what short circuits need."""

    def open_upload(self, key: str) -> LocalFileUpload: ...

    def path(self, key: str) -> Path:
        """The object's file (absolute); keys that would leave the root are refused."""
        ...

    async def open_descriptor(self, key: str) -> tuple[int, int]:
        """(read-only descriptor, size) of the object's file; the caller closes it."""
        ...


@runtime_checkable
class PresigningStore(ObjectStore, Protocol):
    """A backend that can let a caller read an object itself (S3: a presigned GET)."""

    async def presigned_get_url(self, key: str, expires_in_s: int) -> str:
        """A URL that reads `key` (ranges by a Range header) for `expires_in_s` seconds."""
        ...


@dataclass(frozen=True, slots=True)
class StoredPart:
    """A part of a multipart upload as the object store holds it."""

    number: int
    size: int
    etag: str  # S3's, to complete the upload with: an MD5 only on unencrypted buckets


@runtime_checkable
class UploadSigningStore(ObjectStore, Protocol):
    """A backend that can let a caller write objects itself (S3: presigned PUTs)."""

    @property
    def min_part_size(self) -> int:
        """The smallest part but the last of a multipart upload."""
        ...

    async def start_multipart(self, key: str) -> str:
        """A new multipart upload of `key`; its id."""
        ...

    async def presigned_part_url(
        self, key: str, upload_id: str, number: int, expires_in_s: int, md5: str
    ) -> str:
        """A PUT of part `number` that writes only bytes of `md5` (hex), as Content-MD5."""
        ...

    async def presigned_put_url(self, key: str, expires_in_s: int, md5: str) -> str:
        """A PUT of `key` that writes only bytes of `md5` (hex), as Content-MD5."""
        ...

    @property
    def signed_put_headers(self) -> dict[str, str]:
        """Headers a presigned PUT of a whole object signs beside Content-MD5 (S3's
        server-side encryption): its caller must send them as they are."""
        ...

    async def uploaded_parts(self, key: str, upload_id: str) -> list[StoredPart]:
        """The upload's parts, by number; RemoteResourceNotFoundError if it is gone."""
        ...

    async def complete_multipart(
        self, key: str, upload_id: str, parts: list[StoredPart]
    ) -> None: ...

    async def head(self, key: str) -> StoredPart:
        """An object's size and ETag, as part number 0."""
        ...
