"""The caller's deadline, carried through a request's tasks in a context variable.

The servicer sets it from the gRPC call's remaining time; the storage backends
read it to bound their retries, so a retry never outlives the caller's patience.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_deadline: ContextVar[float | None] = ContextVar("remotelog_deadline", default=None)
# Work stops this much before the caller's deadline (at most a tenth of the
# time it gave), so the error that says why (UNAVAILABLE with its reason)
# reaches the caller before its own DEADLINE_EXCEEDED does.
REPLY_MARGIN_S = 0.2


def current_deadline() -> float | None:
    """A time.monotonic() value, or None when the caller set no deadline."""
    return _deadline.get()


def _deadline_after(seconds: float | None) -> float | None:
    if seconds is None:
        return None
    return time.monotonic() + seconds - min(REPLY_MARGIN_S, seconds / 10)


@contextmanager
def deadline_after(seconds: float | None) -> Iterator[None]:
    """Within the block, the deadline is `seconds` from now, less the reply margin.

    None: no deadline.
    """
    token = _deadline.set(_deadline_after(seconds))
    try:
        yield
    finally:
        _deadline.reset(token)


async def stream_within(
    seconds: float | None, source: AsyncGenerator[T, None]
) -> AsyncGenerator[T, None]:
    """`source`'s items, each produced under a deadline `seconds` from the first step.

    For streams, instead of `deadline_after` around a `yield`: an async
    generator runs in its consumer's context, so a variable it sets stays set
    for the consumer between items, and if the generator is closed from
    elsewhere (gRPC abandons a cancelled stream; the garbage collector closes
    it from another task) the reset fails. Here the deadline is set and reset
    within each step, never across a yield.
    """
    deadline = _deadline_after(seconds)
    async with contextlib.aclosing(source):
        while True:
            token = _deadline.set(deadline)
            try:
                item = await anext(source)
            except StopAsyncIteration:
                return
            finally:
                _deadline.reset(token)
            yield item
