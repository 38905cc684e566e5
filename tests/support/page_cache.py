"""Dropping a file's pages from the page cache, for tests of reads that must not block."""

import os
import time
from collections.abc import Callable


def until_evicted(fd: int, missed: Callable[[], bool]) -> bool:
    """Drops `fd`'s pages until `missed()` (one non-blocking read) finds them gone, and
    says whether it did. POSIX_FADV_DONTNEED is advice, not an order: pages still queued
    on another CPU's LRU list stay until a later call finds them there. `missed` is asked
    once per drop: a refused non-blocking read may start the kernel's readahead, which
    can bring the pages back before a second read."""
    os.fsync(fd)  # clean pages can be dropped
    for _ in range(100):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if missed():
            return True
        time.sleep(0.01)
    return False
