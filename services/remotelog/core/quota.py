"""KIP-956's quotas: `remote.log.manager.copy.max.bytes.per.second` over all copies,
`remote.log.manager.fetch.max.bytes.per.second` over all remote reads.

Kafka's RLMQuotaManager measures a rate over `...quota.window.num` samples of
`...quota.window.size.seconds` each. Before a segment is copied, copiers wait
while the measured rate is above the bound, then the segment's size is
recorded; the first segment always goes, so a quota below one segment's size
slows copying down without stopping it. Remote reads are skipped while the
rate is above the bound (`throttle_seconds`), and what they read is recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable


class ByteRateQuota:
    def __init__(
        self,
        bytes_per_second: float,
        window_num: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bound = bytes_per_second
        self.window_num = window_num
        self.window_seconds = window_seconds
        self._clock = clock
        # (window start, time of its first record, bytes)
        self._samples: deque[tuple[float, float, int]] = deque()
        self._lock = asyncio.Lock()
        self.throttled_seconds = 0.0

    def _expire(self, now: float) -> None:
        # Kafka's SampledStat.purgeObsoleteSamples: a sample older than all windows goes.
        while self._samples and now - self._samples[0][0] >= self.window_num * self.window_seconds:
            self._samples.popleft()

    def record(self, size: int) -> None:
        now = self._clock()
        self._expire(now)
        start = now - (now % self.window_seconds)
        if self._samples and self._samples[-1][0] == start:
            _, first, total = self._samples[-1]
            self._samples[-1] = (start, first, total + size)
        else:
            self._samples.append((start, now, size))

    def throttle_seconds(self) -> float:
        """How long to wait before the measured rate is back under the bound (0 = go)."""
        now = self._clock()
        self._expire(now)
        if not self._samples:
            return 0.0
        total = sum(size for _, _, size in self._samples)
        # Kafka's elapsed time (at least all windows but the current one), counted
        # from the oldest sample's first record rather than its window's start:
        # time before anything was recorded would let the rate run over the bound
        # by up to a window's worth, more or less by the phase of the windows.
        elapsed = (
            max(now - self._samples[0][1], (self.window_num - 1) * self.window_seconds)
            or self.window_seconds
        )
        rate = total / elapsed
        if rate <= self.bound:
            return 0.0
        return (rate - self.bound) / self.bound * elapsed

    async def acquire(self, size: int) -> float:
        """Wait until the quota allows `size` bytes, record them; the seconds waited."""
        waited = 0.0
        async with self._lock:
            while (wait := self.throttle_seconds()) > 0:
                self.throttled_seconds += wait
                started = self._clock()
                await asyncio.sleep(min(wait, self.window_seconds))
                waited += self._clock() - started
            self.record(size)
        return waited
