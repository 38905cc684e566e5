"""Whether a compiled function leaks: memory traced across many rounds of it."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable


def growth_over(rounds: int, work: Callable[[], object]) -> int:
    """Bytes still allocated after `rounds` more calls of `work` than after one."""
    work()
    gc.collect()
    tracemalloc.start()
    try:
        work()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(rounds):
            work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
