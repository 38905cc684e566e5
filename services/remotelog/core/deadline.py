"""The caller's deadline, carried through a request's tasks in a context variable.

The servicer sets it from the gRPC call's remaining time; the storage backends
read it to bound their retries, so a retry never outlives the caller's patience.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_deadline: ContextVar[float | None] = ContextVar("remotelog_deadline", default=None)


def current_deadline() -> float | None:
    """A time.monotonic() value, or None when the caller set no deadline."""
    return _deadline.get()


@contextmanager
def deadline_after(seconds: float | None) -> Iterator[None]:
    """Within the block, the deadline is `seconds` from now (None: no deadline)."""
    token = _deadline.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)
