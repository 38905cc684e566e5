"""Exponential backoff with jitter, as Kafka's `ExponentialBackoff`, and a retry loop.

Kafka defines `remote.log.manager.task.retry.backoff.ms`, `...backoff.max.ms`
and `...retry.jitter` for the RemoteLogManager but never uses them; remotelog
does, here.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """backoff(n) = min(max_ms, initial_ms * multiplier**n * U(1 - jitter, 1 + jitter)).

    The exponent stops growing once the un-jittered term reaches `max_ms`
    (Kafka's `expMax`), so large attempt counts never overflow.
    """

    initial_ms: float
    max_ms: float
    multiplier: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.initial_ms < 0 or self.max_ms < 0:
            raise ValueError("backoff intervals must be >= 0")
        if self.multiplier < 1:
            raise ValueError("backoff multiplier must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be within [0, 1]")

    @property
    def _exp_max(self) -> float:
        initial = min(self.initial_ms, self.max_ms)
        if self.max_ms <= initial or self.multiplier == 1:
            return 0.0
        return math.log(self.max_ms / max(initial, 1.0)) / math.log(self.multiplier)

    def backoff_ms(self, attempts: int) -> float:
        """Delay before retry number `attempts + 1` (attempts = failures so far - 1)."""
        initial = min(self.initial_ms, self.max_ms)
        exp_max = self._exp_max
        if exp_max == 0:
            return initial
        term = initial * float(self.multiplier ** min(max(attempts, 0), exp_max))
        factor = self.rng.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter > 0 else 1.0
        return min(term * factor, self.max_ms)


async def retry_async(
    operation: Callable[[], Awaitable[T]],
    *,
    backoff: ExponentialBackoff,
    is_retriable: Callable[[BaseException], bool],
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Run `operation` until it succeeds, retrying retriable failures with backoff.

    `deadline` is a `clock()` value: a retry whose delay would end after it is
    not attempted and the last error is raised, so the caller's deadline bounds
    the whole loop.
    """
    attempts = 0
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not is_retriable(exc):
                raise
            delay_s = backoff.backoff_ms(attempts) / 1000.0
            if deadline is not None and clock() + delay_s >= deadline:
                raise
            attempts += 1
            await sleep(delay_s)
