"""The client end of the segment store's short-circuit channel (short_circuit.proto).

A client on the store's host that is given the store's `short.circuit.socket.path`
sends file descriptors instead of bytes: a copy lends the segment's files, a
fetch gets the stored log file back and reads the page cache itself. A store
that cannot be reached this way (no socket there, an older store) is not an
error: the caller goes on over gRPC.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from remotelog.api.segmentstore.v1 import short_circuit_pb2 as pb
from remotelog.client.errors import from_status
from remotelog.core.errors import DeadlineExceededError, RemoteStorageError
from remotelog.fileio import descriptor_socket
from remotelog.fileio.pagecache import (
    MAP_POPULATE,
    cached_pages,
    map_chunks,
    pages_in,
    pread_cached,
)

K = TypeVar("K", bound=Hashable)
MAX_RESPONSE_BYTES = 64 * 1024
# Idle connections kept for the next requests (each request holds one while it runs).
MAX_IDLE = 8
READ_CHUNK_BYTES = 4 * 1024 * 1024
# Reads longer than this are mapped when views will do; a mapping costs more than
# a copy of a Fetch's MiB. Mapped a block at a time, one thread hop each.
MAPPED_READ_MIN = 2 * 1024 * 1024
MAPPED_BLOCK_BYTES = 8 * 1024 * 1024


class ShortCircuitUnavailable(Exception):
    """The channel could not carry this request; the gRPC call can."""


class ShortCircuit:
    def __init__(self, path: str) -> None:
        self.path = path
        self._idle: list[socket.socket] = []

    async def _connect(self) -> socket.socket:
        sock = descriptor_socket.seqpacket_socket()
        try:
            await asyncio.get_running_loop().sock_connect(sock, self.path)
        except OSError as exc:
            sock.close()
            raise ShortCircuitUnavailable(f"{self.path}: {exc.strerror or exc}") from exc
        return sock

    async def call(
        self, request: pb.ShortCircuitRequest, fds: Sequence[int] = (), *, timeout_s: float
    ) -> tuple[pb.ShortCircuitResponse, list[int]]:
        """The store's answer and the descriptors it sent (the caller's to close).

        A failed request raises its typed error, as the gRPC call would.
        """
        request.timeout_ms = max(1, int(timeout_s * 1000))
        data = request.SerializeToString()
        # An idle connection may be to a store that has since restarted: it is
        # dropped and the next tried, the last try on a new connection, which
        # says whether the store is there at all.
        while True:
            reused = bool(self._idle)
            sock = self._idle.pop() if reused else await self._connect()
            try:
                async with asyncio.timeout(timeout_s):
                    await descriptor_socket.send(sock, data, fds)
                    received = await descriptor_socket.receive(sock, MAX_RESPONSE_BYTES, 1)
            except TimeoutError:
                sock.close()
                raise DeadlineExceededError(
                    f"no short-circuit answer within {timeout_s:g} s"
                ) from None
            except OSError as exc:
                sock.close()
                if reused:
                    continue
                raise ShortCircuitUnavailable(f"{self.path}: {exc}") from exc
            except BaseException:
                sock.close()
                raise
            if received is None:  # closed by the store before it answered
                sock.close()
                if reused:
                    continue
                raise ShortCircuitUnavailable(f"{self.path}: closed by the store")
            self._keep(sock)
            return _response(*received)

    def _keep(self, sock: socket.socket) -> None:
        if len(self._idle) < MAX_IDLE:
            self._idle.append(sock)
        else:
            sock.close()

    def close(self) -> None:
        for sock in self._idle:
            sock.close()
        self._idle.clear()


def _response(data: bytes, fds: list[int]) -> tuple[pb.ShortCircuitResponse, list[int]]:
    try:
        response = pb.ShortCircuitResponse.FromString(data)
        status = status_pb2.Status.FromString(response.status)
    except DecodeError:
        descriptor_socket.close_all(fds)
        raise ShortCircuitUnavailable("the store's answer is not a ShortCircuitResponse") from None
    if status.code:
        descriptor_socket.close_all(fds)
        raise from_status(status)
    return response, fds


async def read_range(
    fd: int, start: int, last: int, *, views: bool = False
) -> AsyncGenerator[bytes | memoryview, None]:
    """Bytes start..last (inclusive) of `fd` in chunks; closes `fd` when done.

    Page-cached bytes are read on the event loop (core/pagecache.py); a read
    that would wait for the disk goes to a thread. With `views`, a long read
    (a bulk read, not a Fetch) is mapped block by block on a thread instead and
    handed out uncopied, as the filesystem store hands out its own reads: the
    caller copies each byte once, into its message. (Mapping the store's file
    is safe: objects are replaced by rename, never shrunk in place.)
    """
    try:
        position = start
        if views and MAP_POPULATE is not None and last + 1 - start > MAPPED_READ_MIN:
            while position <= last:
                through = min(last + 1, position + MAPPED_BLOCK_BYTES)
                mapped = await asyncio.to_thread(
                    map_chunks, fd, position, through, READ_CHUNK_BYTES
                )
                for chunk in mapped:
                    yield chunk
                position = through
            return
        while position <= last:
            want = min(READ_CHUNK_BYTES, last + 1 - position)
            data = pread_cached(fd, want, position)
            if data is None:
                data = await asyncio.to_thread(os.pread, fd, want, position)
            if len(data) < want:
                raise RemoteStorageError(
                    f"the stored log ended at byte {position + len(data)}, before {last + 1}"
                )
            position += want
            yield data
    finally:
        os.close(fd)


def lend(source: os.PathLike[str] | bytes, name: str) -> int:
    """A read-only descriptor of a file to lend; bytes are put in an anonymous file."""
    if isinstance(source, bytes):
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            view = memoryview(source)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            os.close(fd)
            raise
        return fd
    return os.open(source, os.O_RDONLY | os.O_CLOEXEC)


@dataclass(slots=True)
class _Kept:
    fd: int
    size: int
    used_at: float
    pages: mmap.mmap | None = None  # mapped at the first view

    def drop(self) -> None:
        os.close(self.fd)
        self.pages = None  # unmapped when the last view of it goes


class Descriptors(Generic[K]):
    """Descriptors of stored logs read recently, so the next read of one asks the store
    nothing: a Fetch is then a pread, where asking costs a round trip to the store's
    process.

    Each use checks that the file still has a name (fstat: a link count of 0):
    the store replaces an object by renaming a new file over it and deletes by
    unlinking, so a segment deleted or copied again is asked for anew, and the
    store answers NOT_FOUND for one that is gone. Each entry is dropped after
    `idle_s` without a read, the oldest first beyond `max_entries`.

    A short read of page-cached bytes can be a view of a mapping kept with the
    descriptor (`cached_view`), as the filesystem store lends its own reads
    (segmentstore/mapped.py): the caller's response is then the one copy of
    those bytes, where a pread into bytes made two. The store never shrinks
    an object in place, so a mapped page never goes away under a view.
    """

    def __init__(self, max_entries: int = 64, idle_s: float = 30.0) -> None:
        self.max_entries = max_entries
        self.idle_s = idle_s
        self._open: OrderedDict[K, _Kept] = OrderedDict()

    def take(self, key: K) -> tuple[int, int] | None:
        """(a new descriptor of the object, its size), or None if none is kept for `key`."""
        kept = self._use(key)
        return None if kept is None else (os.dup(kept.fd), kept.size)

    def cached_view(self, key: K, start: int, stop: int) -> memoryview | None:
        """Bytes start..stop (exclusive; clipped to the object) of the kept object as a view
        of its mapping when the page cache holds them all; None when it does not, cannot
        tell (no cachestat), or no descriptor is kept for `key`."""
        kept = self._use(key)
        if kept is None:
            return None
        stop = min(stop, kept.size)
        if start >= stop:
            return None
        cached = cached_pages(kept.fd, start, stop - start)
        if cached is None or cached < pages_in(start, stop - start):
            return None  # a touch of an uncached page would wait for the disk right here
        if kept.pages is None:
            try:
                kept.pages = mmap.mmap(kept.fd, kept.size, prot=mmap.PROT_READ)
            except OSError:  # address space, or a file system without mmap: pread it
                return None
        return memoryview(kept.pages)[start:stop]

    def _use(self, key: K) -> _Kept | None:
        self._drop_idle()
        kept = self._open.get(key)
        if kept is None:
            return None
        if os.fstat(kept.fd).st_nlink == 0:
            self._drop(key)
            return None
        kept.used_at = time.monotonic()
        self._open.move_to_end(key)
        return kept

    def keep(self, key: K, fd: int, size: int) -> None:
        """Keep a copy of `fd` (the caller keeps its own) for the next reads of `key`."""
        if key in self._open:
            self._drop(key)
        self._open[key] = _Kept(os.dup(fd), size, time.monotonic())
        while len(self._open) > self.max_entries:
            self._drop(next(iter(self._open)))

    def _drop_idle(self) -> None:
        now = time.monotonic()
        while self._open:
            key, kept = next(iter(self._open.items()))
            if now - kept.used_at < self.idle_s:
                return
            self._drop(key)

    def _drop(self, key: K) -> None:
        self._open.pop(key).drop()

    def close(self) -> None:
        while self._open:
            self._drop(next(iter(self._open)))
