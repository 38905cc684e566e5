"""The page cache: reads that never wait for a disk, and writeback started early.

`pread_cached` answers the bytes if all are in the page cache, else None.

A Fetch reads about a MiB of a segment; when the kernel holds those bytes (a
segment just tiered, or read a moment ago) the copy takes about 0.1 ms, while
a hop to a reader thread and back costs 0.2 ms at the median and 0.4-0.6 ms
at the tail. `pread_cached` lets the caller copy on its own thread (the event
loop) when no wait is possible, and take the hop only for bytes that must
come from a disk. Linux only (preadv2 with RWF_NOWAIT); elsewhere it always
answers None and every read takes the hop, as before.

The compiled `_pagecache.pread_cached` reads straight into a new bytes object;
without it, `os.preadv` reads into a bytearray that is then copied.

`start_writeback` asks the kernel to write dirty bytes of a file to disk now,
without waiting (sync_file_range, as RocksDB's bytes_per_sync). An upload
calls it for each piece it writes: otherwise the kernel keeps a whole segment
dirty until the fsync that publishes it, and that fsync then waits for every
byte (45 ms of a 64 MiB copy here, against 16 ms with writeback started). The
Python fallback calls libc's sync_file_range through ctypes; where libc has
none (not Linux) it does nothing, and the fsync writes everything as before.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable

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


SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h
_libc = ctypes.CDLL(None, use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]


def _start_writeback_python(fd: int, offset: int, length: int) -> None:
    """The reference: what the compiled function does, through ctypes."""
    if length < 0 or offset < 0:
        raise ValueError("start_writeback: negative length or offset")
    if _sync_file_range is None:
        return  # no early writeback on this platform: the publishing fsync writes it all
    if _sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


pread_cached: Callable[[int, int, int], bytes | None]
start_writeback: Callable[[int, int, int], None]
try:
    from remotelog.segmentstore import _pagecache  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the Python references
    pread_cached, start_writeback = _pread_cached_python, _start_writeback_python
else:
    pread_cached, start_writeback = _pagecache.pread_cached, _pagecache.start_writeback
    COMPILED = True
