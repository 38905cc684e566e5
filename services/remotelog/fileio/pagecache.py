"""Reads that never wait for a disk: the bytes if all are in the page cache, else None.

A Fetch reads about a MiB of a segment; when the kernel holds those bytes (a
segment just tiered, or read a moment ago) the copy costs less than a hop to
a reader thread and back, and far less than the hop's tail. `pread_cached`
lets the caller copy on its own thread (the event loop) when no wait is
possible, and take the hop only for bytes that must come from a disk. Linux
only (preadv2 with RWF_NOWAIT); elsewhere it always answers None and every
read takes the hop.

The compiled `_pagecache.pread_cached` reads straight into a new bytes object;
without it, `os.preadv` reads into a bytearray that is then copied.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
from collections.abc import Callable

# Linux (Python >= 3.10): a mapping whose pages are read in when it is made.
MAP_POPULATE: int | None = getattr(mmap, "MAP_POPULATE", None)


def map_chunks(fd: int, start: int, stop: int, chunk_size: int) -> list[memoryview]:
    """Bytes start..stop (exclusive, within the file) of `fd` as views of one read-only
    mapping, `chunk_size` each: no copy. Populated as it is made (MAP_POPULATE where
    there is one), so run it where a disk wait may happen, never on the event loop.

    Only for files never shrunk in place (touching a page past the end kills
    the process): stored objects are replaced by rename, never truncated.
    """
    aligned = start - start % mmap.ALLOCATIONGRANULARITY
    mapped = mmap.mmap(
        fd,
        stop - aligned,
        flags=mmap.MAP_SHARED | (MAP_POPULATE or 0),
        prot=mmap.PROT_READ,
        offset=aligned,
    )
    # The views keep the mapping alive; it is unmapped when the last one goes.
    view = memoryview(mapped)
    return [view[at : at + chunk_size] for at in range(start - aligned, len(view), chunk_size)]


PAGE = mmap.PAGESIZE
# cachestat's number in the generic syscall table, shared by x86_64 and arm64.
_CACHESTAT = 451


class _Range(ctypes.Structure):
    _fields_ = (("off", ctypes.c_uint64), ("len", ctypes.c_uint64))


class _Stat(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint64)
        for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
    )


def _libc_syscall() -> Callable[..., int] | None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return None
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).syscall
    except (AttributeError, OSError):
        return None
    return function


_syscall = _libc_syscall()


def cached_pages(fd: int, offset: int, length: int) -> int | None:
    """How many pages of bytes offset..offset+length of `fd` the page cache holds; None if
    this kernel cannot say (no cachestat, or refused for this file)."""
    if _syscall is None:
        return None
    first = offset - offset % PAGE
    span, stat = _Range(first, offset + length - first), _Stat()
    if _syscall(_CACHESTAT, fd, ctypes.byref(span), ctypes.byref(stat), 0) == 0:
        return int(stat.nr_cache)
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP, errno.EINVAL):
        return None
    raise OSError(code, os.strerror(code))


def pages_in(offset: int, length: int) -> int:
    first = offset - offset % PAGE
    return -(-(offset + length - first) // PAGE)


COMPILED = False


def _pread_cached_python(fd: int, length: int, offset: int) -> bytes | None:
    """The reference: the same answers as the compiled function, one copy more."""
    if length < 0 or offset < 0:
        raise ValueError("pread_cached: negative length or offset")
    nowait = getattr(os, "RWF_NOWAIT", None)
    if nowait is None:
        return None
    buffer = bytearray(length)
    view = memoryview(buffer)
    got = 0
    while got < length:
        try:
            n = os.preadv(fd, [view[got:]], offset + got, nowait)
        except BlockingIOError:
            return None  # some of it is not cached
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS):  # no RWF_NOWAIT for this file
                return None
            raise
        if n == 0:
            break  # end of file: fewer bytes, as pread gives
        got += n
    view.release()
    return bytes(buffer[:got]) if got < length else bytes(buffer)


pread_cached: Callable[[int, int, int], bytes | None]
try:
    from remotelog.fileio import _pagecache  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the Python reference
    pread_cached = _pread_cached_python
else:
    pread_cached, COMPILED = _pagecache.pread_cached, True
