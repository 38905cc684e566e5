"""When each partition's task runs next (RemoteLogManager's per-partition schedule).

A newly assigned partition runs at once; after a run, it runs again one
`remote.log.manager.task.interval.ms` later; after a remote-storage failure,
after an exponential backoff with jitter (`...retry.backoff.ms`,
`...retry.backoff.max.ms`, `...retry.jitter`: Kafka defines them and never
uses them), growing with consecutive failures and reset by a success. A
partition being run is never handed out twice; one unassigned while it runs
is dropped when its run ends.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from remotelog.core.backoff import ExponentialBackoff

K = TypeVar("K", bound=Hashable)


@dataclass
class _Entry:
    next_run: float
    failures: int = 0
    running: bool = False
    removed: bool = False
    soon: bool = False
    generation: int = 0
    last_delay: float | None = None


@dataclass
class PartitionSchedule(Generic[K]):
    interval_s: float
    backoff: ExponentialBackoff
    clock: Callable[[], float]
    _entries: dict[K, _Entry] = field(default_factory=dict)
    _heap: list[tuple[float, int, int, K]] = field(default_factory=list)
    _sequence: itertools.count[int] = field(default_factory=itertools.count)

    def __contains__(self, key: K) -> bool:
        entry = self._entries.get(key)
        return entry is not None and not entry.removed

    def _push(self, key: K, entry: _Entry) -> None:
        entry.generation += 1
        heapq.heappush(self._heap, (entry.next_run, next(self._sequence), entry.generation, key))

    def add(self, key: K) -> None:
        """Schedule `key` to run at once (a no-op if it is already scheduled)."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.removed = False
            return
        entry = self._entries[key] = _Entry(self.clock())
        self._push(key, entry)

    def run_soon(self, key: K) -> None:
        """Run `key` at once (added if missing); if it is running, again right after."""
        entry = self._entries.get(key)
        if entry is None:
            self.add(key)
        elif entry.running:
            entry.removed = False
            entry.soon = True
        else:
            entry.next_run = self.clock()
            self._push(key, entry)

    def remove(self, key: K) -> None:
        """Unschedule `key`; if it is running, it is dropped when its run ends."""
        entry = self._entries.get(key)
        if entry is None:
            return
        if entry.running:
            entry.removed = True
        else:
            del self._entries[key]

    def next_run(self, key: K) -> float | None:
        entry = self._entries.get(key)
        return None if entry is None or entry.removed else entry.next_run

    def last_delay(self, key: K) -> float | None:
        """Seconds from the end of `key`'s last run to its next one (None before any run)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.last_delay

    def failures(self, key: K) -> int:
        entry = self._entries.get(key)
        return 0 if entry is None else entry.failures

    def due(self, limit: int) -> list[K]:
        """Up to `limit` partitions whose time has come, earliest first; they are now running."""
        now = self.clock()
        taken: list[K] = []
        while self._heap and len(taken) < limit and self._heap[0][0] <= now:
            _, _, generation, key = heapq.heappop(self._heap)
            entry = self._entries.get(key)
            if entry is None or entry.generation != generation or entry.removed:
                continue  # superseded or unscheduled
            entry.running = True
            taken.append(key)
        return taken

    def seconds_until_next(self) -> float | None:
        """How long until the earliest scheduled run (0 if one is due); None if none."""
        while self._heap:
            next_run, _, generation, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.generation == generation and not entry.removed:
                return max(0.0, next_run - self.clock())
            heapq.heappop(self._heap)
        return None

    def finished(self, key: K, *, failed: bool) -> None:
        """Record the end of `key`'s run: next run after the interval, or after a backoff."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.running = False
        if entry.removed:
            del self._entries[key]
            return
        if failed:
            delay = self.backoff.backoff_ms(entry.failures) / 1000
            entry.failures += 1
        else:
            delay = self.interval_s
            entry.failures = 0
        if entry.soon:
            delay, entry.soon = 0.0, False
        entry.last_delay = delay
        entry.next_run = self.clock() + delay
        self._push(key, entry)
