"""Process-wide memory settings of a served process: heap thresholds, start-up objects frozen.

Keeping freed heap memory for reuse instead of handing it back to the kernel:

The services move data in chunks of about 1 MiB: each Fetch, each streamed
chunk allocates a few such buffers and frees them a moment later. glibc's
defaults return a freed chunk that size to the kernel (munmap, or a heap trim
past 128 KiB of free top), so the next buffer of the same size is mapped anew
and every one of its 256 pages faults on first touch, which costs more than
the copy itself and shows in the Fetch latency tail.

A fixed mmap threshold of 32 MiB (glibc's own ceiling for its adaptive
threshold) serves those buffers from the heap, and a trim threshold of 64 MiB
keeps up to that much freed memory in the heap for the next one. The resident
size grows by at most that much over the working set. Not glibc (musl, macOS):
nothing to tune, nothing done.

Start-up objects out of the garbage collector's reach: a started service holds
tens of thousands of objects (modules, protobuf descriptors, gRPC,
OpenTelemetry) that live as long as the process, and each full collection
walked them all, making the slowest Fetch of a run. After `gc.freeze()` a full
collection walks only what was made since.

Long-lived objects made later out of its reach too (`SurvivorFreezer`): what a
service holds for a while, e.g. 100,000 delayed fetches in the purgatory, is
walked by every full collection, and each of those stalled the event loop for
30-60 ms on 2 cores, so every expiry due meanwhile fired that late. See the
class for what it costs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
# The same thresholds for a process that glibc starts with them: a Spark executor's
# Python workers, through `spark.executorEnv.GLIBC_TUNABLES` (docs/spark.md).
GLIBC_TUNABLES = (
    f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD_BYTES}"
    f":glibc.malloc.trim_threshold={TRIM_THRESHOLD_BYTES}"
)
# Growth of the small-object heap that alone never thaws the frozen objects: about
# 100 MiB of them. Below it, a thaw would cost a full pause to reclaim little.
THAW_FLOOR_BLOCKS = 2_000_000
# A thaw at least this often all the same: a dead cycle may hold a socket or a file,
# and descriptors run out long before the heap has doubled.
THAW_INTERVAL_S = 600.0


def keep_freed_memory() -> bool:
    """Set glibc's thresholds for this process; whether they were set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False  # not glibc
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    log.debug("malloc thresholds %s", "set" if done else "refused")
    return done


def freeze_startup_objects() -> int:
    """Collect the start-up garbage, then exempt what survives from later collections.

    Returns how many objects were frozen.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class SurvivorFreezer:
    """Freezes what survives two young collections, so that full collections skip it.

    After each collection of the middle or oldest generation, everything left is
    frozen (`gc.freeze()` only relinks lists: constant time), so a full collection
    walks at most what was promoted since the last one. Objects still alive are
    not the collector's job; what dies without a cycle is freed by its reference
    count, frozen or not. The cost: a cycle among frozen objects that dies is not
    reclaimed until the next thaw. A thaw (`gc.unfreeze()`, then one full
    collection that walks the whole heap, then freezing again) comes when the
    small-object heap (`sys.getallocatedblocks()`, a count over arenas, cheap)
    has grown by `growth` (1.0: doubled) since the last one, and by at least
    `floor_blocks`, or `interval_s` after the last one: the leak is bounded by
    the live heap, as a collector with Go's GOGC=100 bounds its garbage, and in
    time, for what a dead cycle holds besides memory. The full pause comes once
    per doubling or interval, not several times a second.
    """

    def __init__(
        self,
        *,
        growth: float = 1.0,
        floor_blocks: int = THAW_FLOOR_BLOCKS,
        interval_s: float = THAW_INTERVAL_S,
    ) -> None:
        self.growth = growth  # of the heap since the last thaw, as a fraction: 1.0 = doubled
        self.floor_blocks = floor_blocks
        self.interval_s = interval_s
        self.thaws = 0
        self._thawed = False
        self._blocks_after_thaw = sys.getallocatedblocks()
        self._thawed_at = time.monotonic()

    def __enter__(self) -> SurvivorFreezer:
        gc.callbacks.append(self._after_collection)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        gc.callbacks.remove(self._after_collection)

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if phase != "stop" or generation == 0:
            return
        if self._thawed:
            if generation < 2:
                return  # keep the thawed objects where the full collection will see them
            self._thawed = False
            self._blocks_after_thaw = sys.getallocatedblocks()
            self._thawed_at = time.monotonic()
        gc.freeze()
        grown = sys.getallocatedblocks() - self._blocks_after_thaw
        if (
            grown > max(self._blocks_after_thaw * self.growth, self.floor_blocks)
            or time.monotonic() - self._thawed_at > self.interval_s
        ):
            gc.unfreeze()
            self._thawed = True
            self.thaws += 1  # no logging here: a callback may run inside logging's own lock


@contextmanager
def long_lived_objects_frozen() -> Iterator[SurvivorFreezer]:
    """For a served process, once started: its start-up objects frozen, then survivors."""
    freeze_startup_objects()
    with SurvivorFreezer() as freezer:
        yield freezer
