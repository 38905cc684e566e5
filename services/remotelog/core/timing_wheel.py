"""Kafka's hierarchical timing wheel (org.apache.kafka.server.util.timer), on an explicit clock.

A wheel has `wheel_size` buckets of `tick_ms` each and spans
`tick_ms * wheel_size`; a task due beyond that goes to an overflow wheel whose
tick is the whole span of the wheel below it, created on demand. Insert and
cancel are O(1) (a bucket is a dict). Only buckets with tasks are in the
delay queue, a heap ordered by bucket expiration, so advancing the clock costs
O(log buckets) per expired bucket, never a scan of pending tasks. When an
overflow bucket expires its tasks are re-inserted and fall into finer wheels,
which is how a task far in the future still fires within one tick.

Nothing here reads a clock or sleeps: `advance(now_ms)` returns what expired.
The asyncio purgatory drives it with a reaper (remotelog.core.purgatory).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class TimerTask:
    """A task due at `expiration_ms`; cancel() removes it from its bucket in O(1)."""

    __slots__ = ("_bucket", "action", "cancelled", "expiration_ms")

    def __init__(self, expiration_ms: int, action: Callable[[], Any]) -> None:
        self.expiration_ms = expiration_ms
        self.action = action
        self.cancelled = False
        self._bucket: _Bucket | None = None

    def cancel(self) -> None:
        self.cancelled = True
        bucket = self._bucket
        if bucket is not None:
            bucket.remove(self)


class _Bucket:
    """TimerTaskList: the tasks of one tick of one wheel, and when that tick ends."""

    __slots__ = ("counter", "expiration_ms", "tasks")

    def __init__(self, counter: list[int]) -> None:
        self.tasks: dict[int, TimerTask] = {}
        self.expiration_ms = -1
        self.counter = counter  # shared pending-task count of the whole timer

    def add(self, task: TimerTask) -> None:
        self.tasks[id(task)] = task
        task._bucket = self
        self.counter[0] += 1

    def remove(self, task: TimerTask) -> None:
        if self.tasks.pop(id(task), None) is not None:
            task._bucket = None
            self.counter[0] -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """True when the expiration changed, i.e. the bucket must be (re)queued."""
        changed = expiration_ms != self.expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self) -> list[TimerTask]:
        tasks = list(self.tasks.values())
        for task in tasks:
            task._bucket = None
        self.counter[0] -= len(tasks)
        self.tasks.clear()
        self.expiration_ms = -1
        return tasks


class _Wheel:
    __slots__ = ("buckets", "current_ms", "interval_ms", "overflow", "tick_ms", "timer")

    def __init__(self, timer: TimingWheelTimer, tick_ms: int, start_ms: int) -> None:
        self.timer = timer
        self.tick_ms = tick_ms
        self.interval_ms = tick_ms * timer.wheel_size
        self.buckets = [_Bucket(timer._counter) for _ in range(timer.wheel_size)]
        self.current_ms = start_ms - start_ms % tick_ms
        self.overflow: _Wheel | None = None

    def add(self, task: TimerTask) -> bool:
        """False when the task is already due (or cancelled): the caller runs it now."""
        expiration = task.expiration_ms
        if task.cancelled or expiration < self.current_ms + self.tick_ms:
            return False
        if expiration < self.current_ms + self.interval_ms:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % len(self.buckets)]
            bucket.add(task)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self.timer._offer(bucket)
            return True
        if self.overflow is None:
            self.overflow = _Wheel(self.timer, self.interval_ms, self.current_ms)
        return self.overflow.add(task)

    def advance(self, time_ms: int) -> None:
        if time_ms >= self.current_ms + self.tick_ms:
            self.current_ms = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance(self.current_ms)


class TimingWheelTimer:
    """SystemTimer without its threads: add tasks, then advance the clock to expire them."""

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0) -> None:
        if tick_ms < 1:
            raise ValueError("tick_ms must be >= 1")
        if wheel_size < 2:
            raise ValueError("wheel_size must be >= 2")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self._counter = [0]
        self._queue: list[tuple[int, int, _Bucket]] = []
        self._sequence = itertools.count()
        self._wheel = _Wheel(self, tick_ms, start_ms)
        # Tasks added already due wait for the next advance(), as Kafka hands
        # them to its executor rather than running them inside add().
        self._due_now: list[TimerTask] = []

    def __len__(self) -> int:
        """Pending (not expired, not cancelled) tasks."""
        return self._counter[0]

    def _offer(self, bucket: _Bucket) -> None:
        heapq.heappush(self._queue, (bucket.expiration_ms, next(self._sequence), bucket))

    def add(self, task: TimerTask) -> bool:
        """Schedule `task`; False when it is already due (the caller should run it now)."""
        return self._wheel.add(task)

    def schedule(self, expiration_ms: int, action: Callable[[], Any]) -> TimerTask:
        task = TimerTask(expiration_ms, action)
        if not self.add(task):
            self._due_now.append(task)
        return task

    def next_expiration_ms(self) -> int | None:
        """When the earliest non-empty bucket expires; None when nothing is pending."""
        if self._due_now:
            return self._wheel.current_ms
        queue = self._queue
        while queue:
            expiration, _, bucket = queue[0]
            if bucket.expiration_ms == expiration and bucket.tasks:
                return expiration
            heapq.heappop(queue)  # a stale entry: the bucket was flushed or emptied
        return None

    def advance(self, now_ms: int) -> list[TimerTask]:
        """Move the clock to `now_ms`; the tasks that expired, in expiration order per bucket."""
        expired = [task for task in self._due_now if not task.cancelled]
        self._due_now.clear()
        queue = self._queue
        while queue and queue[0][0] <= now_ms:
            expiration, _, bucket = heapq.heappop(queue)
            if bucket.expiration_ms != expiration:
                continue  # stale: flushed and re-queued under another expiration
            self._wheel.advance(expiration)
            for task in bucket.flush():
                if not self._wheel.add(task) and not task.cancelled:
                    expired.append(task)
        self._wheel.advance(now_ms)
        return expired
