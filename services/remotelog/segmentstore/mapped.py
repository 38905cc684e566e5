"""Short reads of page-cached bytes as views of a mapping kept open between reads.

A Fetch of a page-cached MiB read it twice: the kernel copied it into a new
bytes object (pread with RWF_NOWAIT, fileio/pagecache.py), then the fetch service
copied it again into its response; the two were a fifth of a Fetch's CPU. A
view of a mapping of the file costs no copy until the response is built.

Two things the pread gave for free are kept:

- **Never waiting for a disk on the event loop.** Touching a mapped page that
  is not in the page cache would read it from disk right there. Before
  lending a view, `cachestat(2)` (Linux 6.5) counts the cached pages of the
  range: all of them, or the caller takes the reader-thread path. mincore(2)
  cannot stand in: for a file the caller may not write it reports every page
  as resident. Where cachestat is missing or refused (ENOSYS, EPERM, ...),
  `available()` is False and the store keeps its preads.
- **Seeing the file as it is now.** Each read stats the path: a file renamed
  over (a retried upload) or deleted (retention) drops its mapping, so a
  deleted file answers "not found" as a pread would. A kept mapping and its
  descriptor pin a deleted file's disk space, so mappings are few
  (`max_files`) and dropped after `idle_s` without a read.

A stored object is never rewritten in place (uploads rename a whole new file
over it, deletes unlink it), so a mapping never loses its pages under a view.
A dropped mapping is not closed: views of it may still be in a response
being built, and it is unmapped when the last of them goes.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from remotelog.fileio.pagecache import cached_pages, pages_in


@dataclass(slots=True)
class _Mapped:
    fd: int
    pages: mmap.mmap | None  # None: an empty file, which cannot be mapped
    identity: tuple[int, int, int]  # device, inode, size
    used_at: float

    def drop(self) -> None:
        os.close(self.fd)
        self.pages = None  # unmapped when the last view of it goes


class MappedFiles:
    """Up to `max_files` files mapped read-only, each dropped after `idle_s` unread."""

    def __init__(self, max_files: int = 32, idle_s: float = 30.0) -> None:
        self.max_files = max_files
        self.idle_s = idle_s
        self._files: OrderedDict[Path, _Mapped] = OrderedDict()
        self._sweep: asyncio.TimerHandle | None = None
        self._unsupported = False

    def available(self) -> bool:
        """False once the kernel could not tell what is cached: use reads that refuse to wait."""
        return not self._unsupported

    def __len__(self) -> int:
        return len(self._files)

    def view(self, path: Path, start: int, end: int) -> memoryview | bytes | None:
        """Bytes start..end (inclusive, clipped to the file) of `path` if all are page-cached:
        a view of its mapping; None if any is not, or if it cannot be told.

        FileNotFoundError and other OSErrors of the stat or open propagate.
        """
        now = time.monotonic()
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            if path in self._files:
                self._forget(path)  # deleted: its space is freed now, not at expiry
            raise
        identity = (stat.st_dev, stat.st_ino, stat.st_size)
        mapped = self._files.get(path)
        if mapped is not None and mapped.identity != identity:
            self._forget(path)
            mapped = None
        if mapped is None:
            mapped = self._map(path, now)
            if mapped is None:
                return None
        else:
            mapped.used_at = now
            self._files.move_to_end(path)
        self._expire(now)
        stop = min(end + 1, mapped.identity[2])
        if start >= stop or mapped.pages is None:
            return b""
        cached = cached_pages(mapped.fd, start, stop - start)
        if cached is None:
            self._unsupported = True
            self.close()
            return None
        if cached < pages_in(start, stop - start):
            return None
        return memoryview(mapped.pages)[start:stop]

    def _map(self, path: Path, now: float) -> _Mapped | None:
        """The file mapped, sized by its own descriptor (the path may have been renamed over
        since the stat: that other file is seen by the next read's stat); None if it
        cannot be mapped (address space, a file system without mmap)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            stat = os.fstat(fd)
            size = stat.st_size
            pages = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None
        except OSError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        mapped = _Mapped(fd, pages, (stat.st_dev, stat.st_ino, size), now)
        self._files[path] = mapped
        while len(self._files) > self.max_files:
            self._forget(next(iter(self._files)))
        self._arm_sweep()
        return mapped

    def _forget(self, path: Path) -> None:
        self._files.pop(path).drop()

    def _expire(self, now: float) -> None:
        while self._files:
            path, oldest = next(iter(self._files.items()))
            if now - oldest.used_at < self.idle_s:
                return
            self._forget(path)

    def _arm_sweep(self) -> None:
        """Without reads nothing would expire: a timer drops idle mappings all the same."""
        if self._sweep is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): reads alone expire mappings
        self._sweep = loop.call_later(self.idle_s, self._swept)

    def _swept(self) -> None:
        self._sweep = None
        self._expire(time.monotonic())
        if self._files:
            self._arm_sweep()

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        while self._files:
            self._forget(next(iter(self._files)))
