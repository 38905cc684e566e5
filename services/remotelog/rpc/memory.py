"""Process-wide memory settings of a service: heap thresholds, start-up objects frozen.

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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


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
