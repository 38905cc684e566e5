"""The copy scheduler's per-partition schedule, on a fake clock."""

import random

from remotelog.core.backoff import ExponentialBackoff
from remotelog.scheduler.schedule import PartitionSchedule


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def schedule(clock: Clock, jitter: float = 0.0) -> PartitionSchedule[str]:
    backoff = ExponentialBackoff(initial_ms=500, max_ms=30_000, jitter=jitter, rng=random.Random(7))
    return PartitionSchedule(interval_s=30.0, backoff=backoff, clock=clock)


def test_new_partitions_run_at_once_then_every_interval():
    clock = Clock()
    s = schedule(clock)
    s.add("a")
    s.add("b")
    assert s.seconds_until_next() == 0.0
    assert s.due(10) == ["a", "b"]
    assert s.due(10) == []  # running: never handed out twice
    s.finished("a", failed=False)
    s.finished("b", failed=False)
    assert s.next_run("a") == 1030.0
    assert s.seconds_until_next() == 30.0
    clock.now = 1029.9
    assert s.due(10) == []
    clock.now = 1030.0
    assert s.due(1) == ["a"]  # bounded by the pool's free workers
    assert s.due(1) == ["b"]


def test_failures_back_off_exponentially_to_the_cap_and_a_success_resets():
    clock = Clock()
    s = schedule(clock)
    s.add("p")
    delays = []
    for _ in range(9):
        assert s.due(1) == ["p"]
        s.finished("p", failed=True)
        delays.append(s.next_run("p") - clock.now)
        clock.now = s.next_run("p")
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert s.failures("p") == 9
    assert s.due(1) == ["p"]
    s.finished("p", failed=False)
    assert s.failures("p") == 0
    assert s.next_run("p") - clock.now == 30.0


def test_jitter_spreads_retries_within_its_bounds():
    clock = Clock()
    s = schedule(clock, jitter=0.2)
    s.add("p")
    s.due(1)
    s.finished("p", failed=True)
    delay = s.next_run("p") - clock.now
    assert 0.4 <= delay <= 0.6
    assert delay != 0.5


def test_a_partition_unassigned_while_running_is_dropped_when_its_run_ends():
    clock = Clock()
    s = schedule(clock)
    s.add("a")
    assert s.due(1) == ["a"]
    s.remove("a")
    assert "a" not in s
    s.finished("a", failed=False)
    clock.now += 100
    assert s.due(10) == []
    assert s.seconds_until_next() is None
    assert s.next_run("a") is None


def test_reassigned_while_running_keeps_running_on_schedule():
    clock = Clock()
    s = schedule(clock)
    s.add("a")
    s.due(1)
    s.remove("a")
    s.add("a")  # assigned again before the run ended
    s.finished("a", failed=False)
    assert s.next_run("a") == 1030.0
    s.remove("a")  # idle: gone at once
    clock.now = 2000
    assert s.due(10) == []


def test_many_partitions_come_due_in_time_order():
    clock = Clock()
    s = schedule(clock)
    keys = [f"p{n}" for n in range(1000)]
    for key in keys:
        s.add(key)
    assert len(s.due(10_000)) == 1000
    for n, key in enumerate(reversed(keys)):
        clock.now = 1000.0 + n / 1000
        s.finished(key, failed=False)
    clock.now = 2000.0
    assert s.due(10_000) == list(reversed(keys))
