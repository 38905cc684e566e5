"""Kafka's hierarchical timing wheel (org.apache.kafka.server.util.timer), on an explicit clock.

A wheel has `wheel_size` buckets of `tick_ms` each and spans
`tick_ms * wheel_size`; a task due beyond that goes to an overflow wheel whose
tick is the whole span of the wheel below it, created on demand. Insert and
cancel are O(1) (a bucket is a dict). Only buckets with tasks are in the
delay queue, a heap ordered by bucket expiration, so advancing the clock costs
O(log buckets) per expired bucket, never a scan of pending tasks. When an
overflow bucket expires its tasks are re-inserted and fall into finer wheels,
which is how a task far in the future still fires within one tick.

One departure from Kafka: a bucket of the third wheel or above spans more
than the first wheel, so when it expires only its tasks due within the first
wheel's span are re-inserted at once. The rest stay in the bucket, detached
from its wheel ("staged"), and are re-inserted a slice per tick, all before
the earliest of them could be due. Re-inserting thousands of tasks in one go
stalls a Python event loop for milliseconds, and every expiry due meanwhile
fires that late; Kafka does it on its reaper thread, at JVM speed.

Nothing here reads a clock or sleeps: `advance(now_ms)` returns what expired.
The asyncio purgatory drives it with a reaper (remotelog.core.purgatory).
"""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any

# Overflow buckets with at most this many tasks are re-inserted in one go.
STAGE_AT_TASKS = 256


class TimerTask(ABC):
    """A task due at `expiration_ms`; `run()` is what its expiry does.

    As in Kafka, where DelayedOperation extends TimerTask, a delayed operation
    is its own timer task: one object per pending operation, not three (a
    task, a bound method and the operation), which is what the garbage
    collector walks with 100,000 of them pending. cancel() removes it from its
    bucket in O(1).
    """

    __slots__ = ("_bucket", "cancelled", "expiration_ms")

    def __init__(self, expiration_ms: int = -1) -> None:
        self.expiration_ms = expiration_ms
        self.cancelled = False
        self._bucket: _Bucket | None = None

    @abstractmethod
    def run(self) -> None:
        """Called once the task expired (never after cancel())."""

    def cancel(self) -> None:
        self.cancelled = True
        bucket = self._bucket
        if bucket is not None:
            bucket.remove(self)


class ScheduledCall(TimerTask):
    """A plain callable on the timer."""

    __slots__ = ("action",)

    def __init__(self, expiration_ms: int, action: Callable[[], Any]) -> None:
        super().__init__(expiration_ms)
        self.action = action

    def run(self) -> None:
        self.action()


class _Bucket:
    """TimerTaskList: the tasks of one tick of one wheel, and when that tick ends."""

    __slots__ = ("counter", "early", "expiration_ms", "index", "slots", "tasks", "tick_ms")

    def __init__(self, counter: list[int], slots: list[_Bucket], index: int, tick_ms: int) -> None:
        self.tasks: dict[int, TimerTask] = {}
        # Of a bucket wider than the first wheel: its tasks due within the first
        # wheel's span of its start, the ones that go back at once when it expires.
        self.early: dict[int, TimerTask] = {}
        self.expiration_ms = -1
        self.counter = counter  # shared pending-task count of the whole timer
        self.slots = slots  # the wheel's bucket list, and this bucket's place in it
        self.index = index
        self.tick_ms = tick_ms

    def add(self, task: TimerTask) -> None:
        self.tasks[id(task)] = task
        task._bucket = self
        self.counter[0] += 1

    def remove(self, task: TimerTask) -> None:
        if self.tasks.pop(id(task), None) is not None:
            if self.early:
                self.early.pop(id(task), None)
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
        self.early.clear()
        self.expiration_ms = -1
        return tasks

    def detach(self) -> None:
        """Leave the wheel, tasks and all (a fresh bucket takes its place); cancel still works."""
        self.slots[self.index] = _Bucket(self.counter, self.slots, self.index, self.tick_ms)
        self.expiration_ms = -1  # its queue entries are stale from now on

    def pop(self, count: int) -> list[TimerTask]:
        """Up to `count` of its tasks, taken out (to be re-inserted)."""
        tasks = self.tasks
        popped = [tasks.popitem()[1] for _ in range(min(count, len(tasks)))]
        for task in popped:
            task._bucket = None
        self.counter[0] -= len(popped)
        return popped


class _Wheel:
    __slots__ = ("buckets", "current_ms", "interval_ms", "overflow", "tick_ms", "timer")

    def __init__(self, timer: TimingWheelTimer, tick_ms: int, start_ms: int) -> None:
        self.timer = timer
        self.tick_ms = tick_ms
        self.interval_ms = tick_ms * timer.wheel_size
        self.buckets: list[_Bucket] = []
        self.buckets.extend(
            _Bucket(timer._counter, self.buckets, index, tick_ms)
            for index in range(timer.wheel_size)
        )
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
            start = virtual_id * self.tick_ms
            if bucket.set_expiration(start):
                self.timer._offer(bucket)
            first_span = self.timer._first_span
            if self.tick_ms > first_span and expiration < start + first_span:
                bucket.early[id(task)] = task
            return True
        if self.overflow is None:
            self.overflow = _Wheel(self.timer, self.interval_ms, self.current_ms)
        return self.overflow.add(task)

    def add_many(self, tasks: list[TimerTask], due: list[TimerTask]) -> None:
        """add() of each task, inlined: a flushed or staged bucket re-inserts hundreds
        at a time on the event loop, and a call per task and per wheel cost half of it.
        Tasks already due (not cancelled) go to `due`."""
        current, tick, interval = self.current_ms, self.tick_ms, self.current_ms + self.interval_ms
        buckets, wheel_size = self.buckets, len(self.buckets)
        timer = self.timer
        first_span = timer._first_span
        wide = tick > first_span
        beyond: list[TimerTask] = []
        added = 0
        for task in tasks:
            expiration = task.expiration_ms
            if task.cancelled:
                continue
            if expiration < current + tick:
                due.append(task)
            elif expiration < interval:
                virtual_id = expiration // tick
                bucket = buckets[virtual_id % wheel_size]
                bucket.tasks[id(task)] = task
                task._bucket = bucket
                added += 1
                start = virtual_id * tick
                if bucket.expiration_ms != start:
                    bucket.expiration_ms = start
                    timer._offer(bucket)
                if wide and expiration < start + first_span:
                    bucket.early[id(task)] = task
            else:
                beyond.append(task)
        timer._counter[0] += added
        if beyond:
            if self.overflow is None:
                self.overflow = _Wheel(timer, self.interval_ms, current)
            self.overflow.add_many(beyond, due)

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
        self._first_span = tick_ms * wheel_size
        self._counter = [0]
        self._queue: list[tuple[int, int, _Bucket]] = []
        self._sequence = itertools.count()
        self._wheel = _Wheel(self, tick_ms, start_ms)
        # Tasks added already due wait for the next advance(), as Kafka hands
        # them to its executor rather than running them inside add().
        self._due_now: list[TimerTask] = []
        # Detached overflow buckets still being re-inserted, each with the time by
        # which all of its tasks must be back in the wheels; in that order.
        self._staged: deque[tuple[int, _Bucket]] = deque()

    def __len__(self) -> int:
        """Pending (not expired, not cancelled) tasks."""
        return self._counter[0]

    def _offer(self, bucket: _Bucket) -> None:
        heapq.heappush(self._queue, (bucket.expiration_ms, next(self._sequence), bucket))

    def add(self, task: TimerTask) -> bool:
        """Schedule `task`; False when it is already due (the caller should run it now)."""
        return self._wheel.add(task)

    def schedule(self, expiration_ms: int, action: Callable[[], Any]) -> ScheduledCall:
        task = ScheduledCall(expiration_ms, action)
        self.schedule_task(task)
        return task

    def schedule_task(self, task: TimerTask) -> None:
        """Schedule `task` at its expiration_ms; if already due, it expires on the next advance."""
        if not self.add(task):
            self._due_now.append(task)

    @property
    def staged(self) -> int:
        """Tasks of expired overflow buckets not yet re-inserted (pending all the same)."""
        return sum(len(bucket.tasks) for _, bucket in self._staged)

    def next_expiration_ms(self) -> int | None:
        """When the earliest non-empty bucket expires; None when nothing is pending.

        While staged tasks wait to be re-inserted, the next tick: each advance
        re-inserts a slice of them.
        """
        if self._due_now:
            return self._wheel.current_ms
        queue = self._queue
        while queue:
            expiration, _, bucket = queue[0]
            if bucket.expiration_ms == expiration and bucket.tasks:
                break
            heapq.heappop(queue)  # a stale entry: the bucket was flushed or emptied
        else:
            expiration = -1
        if self._staged:
            next_tick = self._wheel.current_ms + self.tick_ms
            return next_tick if expiration < 0 else min(expiration, next_tick)
        return expiration if expiration >= 0 else None

    def advance(self, now_ms: int) -> list[TimerTask]:
        """Move the clock to `now_ms`; the tasks that expired, in expiration order per bucket."""
        expired = [task for task in self._due_now if not task.cancelled]
        self._due_now.clear()
        queue, staged, add_many = self._queue, self._staged, self._wheel.add_many
        while True:
            if staged and staged[0][0] <= now_ms and (not queue or staged[0][0] <= queue[0][0]):
                # The clock jumped past a staged bucket's deadline: all of it goes back now.
                _, bucket = staged.popleft()
                add_many(bucket.pop(len(bucket.tasks)), expired)
                continue
            if not queue or queue[0][0] > now_ms:
                break
            expiration, _, bucket = heapq.heappop(queue)
            if bucket.expiration_ms != expiration:
                continue  # stale: flushed and re-queued under another expiration
            self._wheel.advance(expiration)
            if bucket.tick_ms > self._first_span and len(bucket.tasks) > STAGE_AT_TASKS:
                self._stage(bucket, expiration + self._first_span, expired)
                continue
            add_many(bucket.flush(), expired)
        self._wheel.advance(now_ms)
        if staged:
            deadline, bucket = staged[0]
            # Spread the bucket over the ticks left before its deadline but two (a
            # margin for a late tick): over half of them, each tick of a 400 ms
            # bucket's spell re-inserted 800 tasks of 100,000 pending, 2.5 ms.
            ticks = max(1, (deadline - now_ms) // self.tick_ms - 2)
            add_many(bucket.pop(-(-len(bucket.tasks) // ticks)), expired)
            if not bucket.tasks:
                staged.popleft()
        return expired

    def _stage(self, bucket: _Bucket, deadline_ms: int, expired: list[TimerTask]) -> None:
        """Re-insert the bucket's early tasks now (due before `deadline_ms`); stage the rest.

        The wheels have just advanced to the bucket's expiration, so the first
        wheel spans up to `deadline_ms`: every task due later goes to a wheel
        whose buckets expire no sooner than that, and may wait until then.
        Finding the early ones takes no scan: add() kept them aside.
        """
        bucket.detach()
        early = list(bucket.early.values())
        for task in early:
            bucket.remove(task)
        self._wheel.add_many(early, expired)
        if bucket.tasks:
            self._staged.append((deadline_ms, bucket))
