"""Starting the disk write of an upload's bytes while the rest still arrives.

An upload's fsync at the end waits for every byte the kernel still holds
dirty; written in one go, that wait is half of a large copy. Asking the
kernel to start writing each few MiB as soon as it is written
(sync_file_range with SYNC_FILE_RANGE_WRITE: start writeback, wait for
nothing) overlaps the disk with the receiving, and the final fsync finds
almost nothing left. RocksDB's `bytes_per_sync` does the same for
the same reason. It changes no guarantee: durability still comes from the
fsync before the rename, only sooner.

Linux only (glibc's sync_file_range through ctypes); elsewhere, or on a file
system that does not support it, `start_writeback` answers False and the
upload leaves it all to its fsync.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable

SYNC_FILE_RANGE_WRITE = 2
# Answers that mean "not here" (no such call, a file system or file kind
# without it): the caller stops asking. Any other error is the disk's.
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EINVAL, errno.ESPIPE, errno.EOPNOTSUPP})


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):  # not Linux, or a libc without it
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range = _libc_sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Start writing bytes offset..offset+length of `fd` to disk; False if unsupported.

    Does not wait for the write (it may wait for room in the device's queue,
    which is why callers run it on a file thread). Raises OSError for a disk
    error, as the write or fsync would.
    """
    if _sync_file_range is None:
        return False
    if _sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code))
