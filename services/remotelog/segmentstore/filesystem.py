"""Filesystem backend: objects are files under a root, in a layout a person can read.

Like Kafka's LocalTieredStorage, `<root>/<topic>-<topicId>/<partition>/<offset>-<uuid>.log`.
An upload writes `<key>.<random>.tmp` beside its final name, then fsyncs it,
renames it into place and fsyncs the directory: a crash leaves either the old
state or the whole new object, never half of one under the final name. Blocking
file calls run in a bounded thread pool, never on the event loop; the one
exception is a short read whose bytes are all in the page cache, answered on
the loop, which is what a Fetch costs most when it takes the hop: as a view
of a mapping kept between reads, its pages counted first (mapped.py), or
where the kernel cannot count them, copied by a read that refuses to wait
(fileio/pagecache.py).

Long reads are not copied here at all: a reader thread maps each block of the
file with MAP_POPULATE (so any wait for the disk happens on that thread) and
the chunks are views of the mapping. Whoever sends them copies them once, into
its message, as a plain server copies what it read; reading into bytes and
then framing them was two copies, a third of a bulk read's CPU. A stored
object is never rewritten in place (uploads rename a whole new file over it,
deletes unlink it), so a mapping never loses its pages under a reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import secrets
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from remotelog.core.errors import RemoteResourceNotFoundError, RemoteStorageError
from remotelog.core.setting_paths import make_directory
from remotelog.fileio.pagecache import MAP_POPULATE, map_chunks, pread_cached
from remotelog.segmentstore.backend import Chunk, IncompleteUpload, StoredObject
from remotelog.segmentstore.mapped import MappedFiles
from remotelog.segmentstore.writeback import start_writeback

T = TypeVar("T")
TMP_SUFFIX = ".tmp"
READ_BLOCK = 8 * 1024 * 1024
# Ranges up to this size are first tried from the page cache on the event loop
# (a Fetch reads about 1 MiB); longer reads are bulk reads, whose copies belong
# on the reader threads, overlapping the consumer.
CACHED_READ_MAX = 2 * 1024 * 1024
RESOLVED_KEYS_MAX = 4096
# Writes of one upload running at once (memory: this many of the caller's chunks).
WRITES_IN_FLIGHT = 4
# Makes of an upload's directory that a concurrent delete may each undo.
_CREATE_ATTEMPTS = 5
# Listed entries a file thread hands over at a time.
_LIST_BATCH = 1000
# copy_file_range cannot copy between these two files (another filesystem on an
# old kernel, a filesystem without it): the copy reads and writes instead.
_NO_COPY_FILE_RANGE = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


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


def _open_and_read(
    path: Path, start: int, end: int | None, block: int, chunk_size: int
) -> tuple[int, int, list[Chunk]]:
    """(descriptor, where the read stops, its first block) of bytes start..end of `path`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        stop = size if end is None else min(end + 1, size)
        return fd, stop, _read_block(fd, start, min(stop, start + block), chunk_size)
    except BaseException:
        os.close(fd)
        raise


def _open_sized(path: Path) -> tuple[int, int]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fd, os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        raise


def _release_opened(opened: tuple[int, int, list[Chunk]]) -> None:
    """What an abandoned first hop opened: its descriptor, and its block's mapping."""
    os.close(opened[0])
    opened[2].clear()


def _read_block(fd: int, start: int, stop: int, chunk_size: int) -> list[Chunk]:
    """Bytes start..stop (exclusive) of `fd` as chunks: views of a mapping, or bytes."""
    if start >= stop:
        return []
    if MAP_POPULATE is None:
        chunks: list[Chunk] = []
        while start < stop and (data := os.pread(fd, min(chunk_size, stop - start), start)):
            chunks.append(data)
            start += len(data)
        return chunks
    stop = min(stop, os.fstat(fd).st_size)  # never map past the end: touching it faults
    if start >= stop:
        return []
    return list[Chunk](map_chunks(fd, start, stop, chunk_size))


def _in_chunks(data: bytes | memoryview, chunk_size: int) -> Iterator[Chunk]:
    if len(data) <= chunk_size:
        yield data
        return
    view = memoryview(data)  # views, not copies: the sender copies each once
    for offset in range(0, len(data), chunk_size):
        yield view[offset : offset + chunk_size]


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
    def __init__(self, root: Path, *, io_threads: int = 8, bytes_per_sync: int = 0) -> None:
        """`bytes_per_sync`: an upload starts writing to disk each time this many more
        bytes are written (writeback.py); 0 leaves it all to the final fsync."""
        self.root = root.resolve()
        self.bytes_per_sync = bytes_per_sync
        make_directory(self.root, "storage.root")
        self._pool = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="fs-store")
        self._paths: dict[str, Path] = {}
        self._mapped = MappedFiles()
        self._cleanups: set[asyncio.Future[None]] = set()

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

        Resolved once per key (resolving it anew costs a Fetch lstat calls and
        pathlib work); the cache is dropped whole when it fills.
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
    ) -> AsyncGenerator[Chunk, None]:
        path = self.path(key)
        if end is not None and end - start < CACHED_READ_MAX:
            with _storage_errors():
                if self._mapped.available():
                    cached = self._mapped.view(path, start, end)
                else:
                    cached = _read_if_cached(path, start, end)
            if cached is not None:
                for chunk in _in_chunks(cached, chunk_size):
                    yield chunk
                return
        # One thread hop per READ_BLOCK, not per chunk: hops cost more than the copy.
        block = max(chunk_size, READ_BLOCK - READ_BLOCK % chunk_size)
        # The first hop opens, sizes and reads: a short read (a Fetch) is one hop.
        fd, stop, chunks = await self._run(
            partial(_open_and_read, path, start, end, block, chunk_size),
            _release_opened,
        )
        try:
            position = start
            while chunks:
                for chunk in chunks:
                    position += len(chunk)
                    yield chunk
                # The hop's future may outlive it (a reference cycle until the next
                # collection): emptied, its list no longer holds the block's mapping.
                chunks.clear()
                if position >= stop:
                    break
                through = min(stop, position + block)
                chunks = await self._run(
                    partial(_read_block, fd, position, through, chunk_size), list.clear
                )
        finally:
            chunks.clear()  # a reader that stopped early: the rest of the block goes now
            os.close(fd)

    async def get(self, key: str) -> bytes:
        path = self.path(key)
        return await self._run(path.read_bytes)

    async def open_descriptor(self, key: str) -> tuple[int, int]:
        path = self.path(key)
        return await self._run(partial(_open_sized, path), lambda opened: os.close(opened[0]))

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            await self._run(partial(self.path(key).unlink, missing_ok=True))
        parents = {self.path(key).parent for key in keys}
        await self._run(partial(self._remove_empty_directories, parents))

    def _remove_empty_directories(self, directories: set[Path]) -> None:
        """Each directory and its parents up to the root, while empty: a deleted
        partition leaves no `<topic>-<id>/<partition>/` behind. A copy racing into
        the same partition makes its directory again (FileUpload)."""
        for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
            while directory != self.root and self.root in directory.parents:
                try:
                    directory.rmdir()
                except FileNotFoundError:
                    pass  # removed by a delete beside this one: its parent may be empty too
                except OSError:
                    break  # not empty: neither is any parent
                directory = directory.parent

    def _walk(self, prefix: str, temporary: bool) -> Iterator[tuple[str, os.stat_result]]:
        """(key, stat) of the files under `prefix` in key order, as S3 lists them: the
        temp files of uploads, or the others. One directory's names are held at a time,
        never the whole tree (a listing of a large store for `recover`)."""
        # From the prefix's own directory: a segment's delete looks beside its objects only.
        start = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        if not start.resolve().is_relative_to(self.root):
            return
        yield from self._walk_directory(start, prefix, temporary)

    def _walk_directory(
        self, directory: Path, prefix: str, temporary: bool
    ) -> Iterator[tuple[str, os.stat_result]]:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return  # removed meanwhile (a deleted partition), or never made
        # Keys sort as their names with a directory's `/` after it, so a file `a.log`
        # comes before anything in a directory `a` and `a/x` before a file `a0`.
        named = sorted(((e.name + "/" if e.is_dir() else e.name), e) for e in entries)
        for name, entry in named:
            path = Path(directory, entry.name)
            key = path.relative_to(self.root).as_posix()
            if name.endswith("/"):
                # Not a link out of the tree; only where the prefix can reach.
                reachable = (key + "/").startswith(prefix) or prefix.startswith(key + "/")
                if reachable and not entry.is_symlink():
                    yield from self._walk_directory(path, prefix, temporary)
                continue
            if entry.name.endswith(TMP_SUFFIX) is not temporary or not key.startswith(prefix):
                continue
            with contextlib.suppress(FileNotFoundError):  # renamed or removed meanwhile
                yield key, entry.stat()

    async def _listed(
        self, prefix: str, temporary: bool
    ) -> AsyncIterator[tuple[str, os.stat_result]]:
        """_walk's entries, a batch at a time from a file thread."""
        walk = self._walk(prefix, temporary)
        while batch := await self._run(partial(_take, walk, _LIST_BATCH)):
            for entry in batch:
                yield entry

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        async for key, stat in self._listed(prefix, False):
            yield StoredObject(key, stat.st_size, stat.st_mtime)

    async def incomplete_uploads(self, prefix: str) -> AsyncIterator[IncompleteUpload]:
        # As S3 lists them: the key the upload was for, and the upload's own id (here
        # its temp file's name, `<name>.<token>.tmp`, beside where the object goes).
        async for temp, stat in self._listed(prefix, True):
            directory, _, name = temp.rpartition("/")
            key = f"{directory}/{name.rsplit('.', 2)[0]}" if directory else name.rsplit(".", 2)[0]
            yield IncompleteUpload(key, name, stat.st_mtime)

    async def abort_upload(self, upload: IncompleteUpload) -> None:
        directory, _, name = upload.key.rpartition("/")
        temp = upload.upload_id
        if "/" in temp or not (temp.startswith(f"{name}.") and temp.endswith(TMP_SUFFIX)):
            raise RemoteStorageError(f"{temp!r} is not a temp file of an upload of {upload.key!r}")
        path = self.path(f"{directory}/{temp}" if directory else temp)
        await self._run(partial(path.unlink, missing_ok=True))

    async def clean_up(self, cleanup: Coroutine[object, object, None]) -> None:
        """Run `cleanup` to its end even if the caller is cancelled meanwhile (a call
        whose client went away is cancelled again while it cleans up)."""
        task = asyncio.ensure_future(cleanup)
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        await asyncio.shield(task)

    async def close(self) -> None:
        if self._cleanups:
            await asyncio.wait(self._cleanups)
        self._mapped.close()
        self._pool.shutdown(wait=True)


class FileUpload:
    """A temp file written by the store's file threads, renamed into place at completion.

    Up to WRITES_IN_FLIGHT writes run while the caller goes on to its next
    chunk (each is a pwrite at its own position, so their order does not
    matter): receiving and writing overlap instead of taking turns.
    """

    def __init__(self, store: FileSystemStore, final: Path) -> None:
        self._store = store
        self._final = final
        self._tmp = final.with_name(f"{final.name}.{secrets.token_hex(6)}{TMP_SUFFIX}")
        self._file: int | None = None
        self._size = 0
        # Oldest first: the writes the caller has not yet waited for.
        self._writing: deque[Future[None]] = deque()
        # Every job of this upload on a file thread that may not have ended. A
        # cancelled caller stops waiting, not the thread: abort() waits for them
        # all, so none creates the temp file after it is removed or uses the
        # descriptor after it is closed (and maybe reused by another upload).
        self._jobs: list[Future[Any]] = []
        self._creating: Future[int] | None = None
        self._publishing: Future[None] | None = None

    def _submit(self, fn: Callable[[], T]) -> Future[T]:
        self._jobs = [job for job in self._jobs if not job.done()]
        job = self._store._pool.submit(fn)
        self._jobs.append(job)
        return job

    async def _opened(self) -> int:
        if self._file is None:
            if self._creating is None:
                self._creating = self._submit(self._create)
            with _storage_errors():
                fd = await asyncio.wrap_future(self._creating)
            self._file = fd
            return fd
        return self._file

    def _create(self) -> int:
        # A delete of the partition's last segment removes its directory and
        # may do so between the mkdir and the open: make it again.
        attempts = _CREATE_ATTEMPTS
        while True:
            self._tmp.parent.mkdir(parents=True, exist_ok=True)
            try:
                return os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except FileNotFoundError:
                attempts -= 1
                if not attempts:
                    raise

    async def _settle_oldest(self) -> None:
        with _storage_errors():
            await asyncio.wrap_future(self._writing[0])
        self._writing.popleft()

    async def write(self, data: Chunk) -> None:
        fd = await self._opened()
        while len(self._writing) >= WRITES_IN_FLIGHT:
            await self._settle_oldest()
        position, self._size = self._size, self._size + len(data)
        self._writing.append(self._submit(partial(self._write, fd, data, position)))

    async def write_file(self, fd: int, offset: int, length: int) -> int:
        target = await self._opened()
        while self._writing:
            await self._settle_oldest()
        position = self._size
        job = self._submit(partial(self._copy_file, fd, offset, length, target, position))
        with _storage_errors():
            copied = await asyncio.wrap_future(job)
        self._size += copied
        return copied

    def _copy_file(self, source: int, offset: int, length: int, target: int, position: int) -> int:
        """On a file thread: copy_file_range in steps of the sync size, each step's disk
        writes started as in _write; a pread/pwrite loop where the kernel cannot."""
        step = self._store.bytes_per_sync or READ_BLOCK
        copied = 0
        in_kernel = hasattr(os, "copy_file_range")  # Linux
        while copied < length:
            want = min(step, length - copied)
            if in_kernel:
                try:
                    n = os.copy_file_range(source, target, want, offset + copied, position + copied)
                except OSError as exc:
                    if exc.errno not in _NO_COPY_FILE_RANGE:
                        raise
                    in_kernel = False
                    continue
            else:
                data = os.pread(source, want, offset + copied)
                _pwrite_all(target, data, position + copied)
                n = len(data)
            if n == 0:
                break  # the file ended early: the caller says so
            self._started_writeback(target, position + copied, n)
            copied += n
        return copied

    def _write(self, fd: int, data: Chunk, position: int) -> None:
        """On a file thread: write, then start the disk on the sync blocks this one filled."""
        _pwrite_all(fd, data, position)
        self._started_writeback(fd, position, len(data))

    def _started_writeback(self, fd: int, position: int, length: int) -> None:
        every = self._store.bytes_per_sync
        end = position + length
        if every and end // every > position // every:
            first = position - position % every
            if not start_writeback(fd, first, end - end % every - first):
                self._store.bytes_per_sync = 0  # not on this system: the fsync does it all

    async def complete(self) -> int:
        fd = await self._opened()
        while self._writing:
            await self._settle_oldest()

        def publish() -> None:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._tmp, self._final)
            directory = os.open(self._final.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

        # From here the descriptor is publish's to close, once it runs.
        self._file = None
        self._publishing = self._submit(publish)
        with _storage_errors():
            await asyncio.wrap_future(self._publishing)
        return self._size

    async def abort(self) -> None:
        # Run to its end even if the caller is cancelled again while it waits.
        await self._store.clean_up(self._drop())

    async def _drop(self) -> None:
        jobs, self._jobs = self._jobs, []
        self._writing.clear()
        # Their errors are the caller's; here they only have to have ended.
        await asyncio.gather(*(asyncio.wrap_future(job) for job in jobs), return_exceptions=True)
        created, self._creating, self._file = self._creating, None, None
        publish = self._publishing
        fd = None
        if (
            created is not None
            and not created.cancelled()
            and created.exception() is None
            and (publish is None or publish.cancelled())
        ):
            fd = created.result()

        def drop() -> None:
            if fd is not None:
                os.close(fd)
            self._tmp.unlink(missing_ok=True)

        await self._store._run(drop)


def _pwrite_all(fd: int, data: Chunk, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def _take(items: Iterator[T], count: int) -> list[T]:
    return list(itertools.islice(items, count))
