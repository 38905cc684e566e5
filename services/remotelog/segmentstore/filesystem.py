"""Filesystem backend: objects are files under a root, in a layout a person can read.

Like Kafka's LocalTieredStorage, `<root>/<topic>-<topicId>/<partition>/<offset>-<uuid>.log`.
An upload writes `<key>.<random>.tmp` beside its final name, then fsyncs it,
renames it into place and fsyncs the directory: a crash leaves either the old
state or the whole new object, never half of one under the final name. Blocking
file calls run in a bounded thread pool, never on the event loop; the one
exception is a short read whose bytes are all in the page cache, copied on the
loop with a read that refuses to wait (pagecache.py) after an open and fstat
of the file, which is what a Fetch costs most when it takes the hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from remotelog.core.errors import RemoteResourceNotFoundError, RemoteStorageError
from remotelog.segmentstore.backend import IncompleteUpload, StoredObject
from remotelog.segmentstore.pagecache import pread_cached

T = TypeVar("T")
TMP_SUFFIX = ".tmp"
READ_BLOCK = 8 * 1024 * 1024
# Ranges up to this size are first tried from the page cache on the event loop
# (a Fetch reads about 1 MiB); longer reads are bulk reads, whose copies belong
# on the reader threads, overlapping the consumer.
CACHED_READ_MAX = 2 * 1024 * 1024
RESOLVED_KEYS_MAX = 4096


def _release_abandoned(release: Callable[[T], object], work: Future[T]) -> None:
    if not work.cancelled() and work.exception() is None:
        release(work.result())


def _read_if_cached(path: Path, start: int, end: int) -> bytes | None:
    """Bytes start..end of `path` if all are in the page cache; None if any is not."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        stop = min(end + 1, size)
        return pread_cached(fd, stop - start, start) if start < stop else b""
    finally:
        os.close(fd)


def _open_and_read(path: Path, start: int, end: int | None, block: int) -> tuple[int, int, bytes]:
    """(descriptor, where the read stops, its first block) of bytes start..end of `path`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        stop = size if end is None else min(end + 1, size)
        data = os.pread(fd, min(block, stop - start), start) if start < stop else b""
    except BaseException:
        os.close(fd)
        raise
    return fd, stop, data


def _in_chunks(data: bytes, chunk_size: int) -> Iterator[bytes]:
    for offset in range(0, len(data), chunk_size):
        yield data[offset : offset + chunk_size]  # no copy when one chunk


@contextlib.contextmanager
def _storage_errors() -> Iterator[None]:
    """File errors as the store's: a missing file is a missing object."""
    try:
        yield
    except FileNotFoundError as exc:
        raise RemoteResourceNotFoundError(f"no object {exc.filename}") from None
    except OSError as exc:
        raise RemoteStorageError(f"filesystem store: {exc}") from None


class FileSystemStore:
    def __init__(self, root: Path, *, io_threads: int = 8) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="fs-store")
        self._paths: dict[str, Path] = {}

    async def _run(self, fn: Callable[[], T], release: Callable[[T], object] | None = None) -> T:
        """`fn` in the pool; `release` gets its result if the caller stopped waiting for it."""
        work = self._pool.submit(fn)
        try:
            with _storage_errors():
                return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            if release is not None:
                work.add_done_callback(partial(_release_abandoned, release))
            raise

    def path(self, key: str) -> Path:
        """The file of `key`; keys that would leave the root are refused.

        Resolved once per key (a Fetch resolving it anew spent 50 us on lstat
        calls and pathlib); the cache is dropped whole when it fills.
        """
        path = self._paths.get(key)
        if path is None:
            path = (self.root / key).resolve()
            if not path.is_relative_to(self.root) or path == self.root:
                raise RemoteStorageError(f"key {key!r} leaves the store root")
            if len(self._paths) >= RESOLVED_KEYS_MAX:
                self._paths.clear()
            self._paths[key] = path
        return path

    def open_upload(self, key: str) -> FileUpload:
        return FileUpload(self, self.path(key))

    async def put(self, key: str, data: bytes) -> None:
        upload = self.open_upload(key)
        try:
            await upload.write(data)
            await upload.complete()
        except BaseException:
            await upload.abort()
            raise

    async def read(
        self, key: str, start: int, end: int | None, chunk_size: int
    ) -> AsyncGenerator[bytes, None]:
        path = self.path(key)
        if end is not None and end - start < CACHED_READ_MAX:
            with _storage_errors():
                cached = _read_if_cached(path, start, end)
            if cached is not None:
                for chunk in _in_chunks(cached, chunk_size):
                    yield chunk
                return
        # One thread hop per READ_BLOCK, not per chunk: hops cost more than the copy.
        block = max(chunk_size, READ_BLOCK - READ_BLOCK % chunk_size)
        # The first hop opens, sizes and reads: a short read (a Fetch) is one hop.
        fd, stop, data = await self._run(
            partial(_open_and_read, path, start, end, block), lambda opened: os.close(opened[0])
        )
        try:
            position = start
            while data:
                position += len(data)
                for chunk in _in_chunks(data, chunk_size):
                    yield chunk
                if position >= stop:
                    break
                data = await self._run(partial(os.pread, fd, min(block, stop - position), position))
        finally:
            os.close(fd)

    async def get(self, key: str) -> bytes:
        path = self.path(key)
        return await self._run(path.read_bytes)

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            await self._run(partial(self.path(key).unlink, missing_ok=True))

    def _walk(self, prefix: str, temporary: bool) -> list[tuple[str, os.stat_result]]:
        """(key, stat) of the files under `prefix`: the temp files of uploads, or the others."""
        found = []
        for directory, _, files in os.walk(self.root):
            for name in files:
                if name.endswith(TMP_SUFFIX) is not temporary:
                    continue
                full = Path(directory, name)
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
                        found.append((key, full.stat()))
        return sorted(found)

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        for key, stat in await self._run(partial(self._walk, prefix, False)):
            yield StoredObject(key, stat.st_size, stat.st_mtime)

    async def incomplete_uploads(self, prefix: str) -> AsyncIterator[IncompleteUpload]:
        for key, stat in await self._run(partial(self._walk, prefix, True)):
            yield IncompleteUpload(key, key.rsplit("/", 1)[-1], stat.st_mtime)

    async def abort_upload(self, upload: IncompleteUpload) -> None:
        if not upload.key.endswith(TMP_SUFFIX):
            raise RemoteStorageError(f"{upload.key!r} is not an upload's temp file")
        await self._run(partial(self.path(upload.key).unlink, missing_ok=True))

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


class FileUpload:
    def __init__(self, store: FileSystemStore, final: Path) -> None:
        self._store = store
        self._final = final
        self._tmp = final.with_name(f"{final.name}.{secrets.token_hex(6)}{TMP_SUFFIX}")
        self._file: int | None = None
        self._size = 0

    async def write(self, data: bytes) -> None:
        if self._file is None:

            def create() -> int:
                self._tmp.parent.mkdir(parents=True, exist_ok=True)
                return os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

            self._file = await self._store._run(create)
        fd = self._file
        await self._store._run(lambda: _write_all(fd, data))
        self._size += len(data)

    async def complete(self) -> int:
        if self._file is None:
            await self.write(b"")
        fd = self._file
        assert fd is not None

        def publish() -> None:
            os.fsync(fd)
            os.close(fd)
            os.replace(self._tmp, self._final)
            directory = os.open(self._final.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

        self._file = None
        await self._store._run(publish)
        return self._size

    async def abort(self) -> None:
        fd, self._file = self._file, None

        def drop() -> None:
            if fd is not None:
                os.close(fd)
            self._tmp.unlink(missing_ok=True)

        await self._store._run(drop)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
