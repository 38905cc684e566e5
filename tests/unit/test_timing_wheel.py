"""The hierarchical timing wheel and the purgatory on it, on a clock the test moves.

Kafka's semantics: a task lands in the bucket of its tick and fires when the
clock reaches that tick's start, so with a 1 ms tick it fires at its
expiration and with a coarser tick at most one tick early, never late.
"""

import random

import pytest
from support.waiting import eventually

from remotelog.core.purgatory import DelayedOperation, DelayedOperationPurgatory
from remotelog.core.timing_wheel import ScheduledCall, TimerTask, TimingWheelTimer

N = 100_000


def run_clock(timer, fired, steps):
    for now in steps:
        for task in timer.advance(now):
            fired.setdefault(id(task), []).append(now)
            task.run()


@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(1, 20), (10, 8), (3, 64)])
def test_100k_tasks_fire_once_at_their_tick_and_cancelled_ones_never(tick_ms, wheel_size):
    rng = random.Random(405)
    timer = TimingWheelTimer(tick_ms, wheel_size, start_ms=0)
    tasks = []
    for _ in range(N):
        # Mostly within the first wheels, some far out in overflow wheels.
        horizon = 100_000 if rng.random() < 0.9 else 50_000_000
        tasks.append(timer.schedule(rng.randrange(tick_ms, horizon), lambda: None))
    assert len(timer) == N
    cancelled = set(rng.sample(range(N), N // 4))
    for index in cancelled:
        tasks[index].cancel()
    assert len(timer) == N - len(cancelled)

    steps, now = [], 0
    while now < 50_000_000:
        now += rng.choice((1, 7, 150, 4_000, 90_000))
        steps.append(now)
    fired: dict[int, list[int]] = {}
    run_clock(timer, fired, steps)

    assert len(timer) == 0
    for index, task in enumerate(tasks):
        if index in cancelled:
            assert id(task) not in fired
            continue
        (fired_at,) = fired[id(task)]
        tick_start = task.expiration_ms - task.expiration_ms % tick_ms
        previous = steps[steps.index(fired_at) - 1] if steps.index(fired_at) else 0
        assert previous < tick_start <= fired_at


def test_next_expiration_is_never_after_the_earliest_pending_task():
    rng = random.Random(1)
    timer = TimingWheelTimer(1, 20, start_ms=0)
    assert timer.next_expiration_ms() is None
    tasks = [timer.schedule(rng.randrange(1, 1_000_000), lambda: None) for _ in range(2_000)]
    now = 0
    while len(timer):
        pending = [t.expiration_ms for t in tasks if t._bucket is not None]
        next_ms = timer.next_expiration_ms()
        assert next_ms is not None
        assert next_ms <= min(pending)
        now = next_ms
        timer.advance(now)
    assert timer.next_expiration_ms() is None


def test_a_large_overflow_bucket_goes_back_a_slice_per_tick_and_each_task_fires_on_time():
    # With tick 1 and 20 buckets, [400, 800) is one bucket of the third wheel.
    rng = random.Random(3)
    timer = TimingWheelTimer(1, 20, start_ms=0)
    tasks = [timer.schedule(rng.randrange(400, 800), lambda: None) for _ in range(10_000)]
    cancelled = [task for task in tasks if task.expiration_ms >= 500][:100]
    assert timer.advance(399) == []
    assert timer.staged == 0

    assert [t.expiration_ms for t in timer.advance(400)] == [
        t.expiration_ms for t in tasks if t.expiration_ms == 400
    ]
    # What is due within the first wheel's 20 ms went back at once, the rest
    # only as far as a first slice.
    later = sum(1 for t in tasks if t.expiration_ms >= 420)
    assert later * 0.8 < timer.staged < later
    assert timer.next_expiration_ms() == 401
    for task in cancelled:  # cancel reaches a staged task too
        task.cancel()
    assert len(timer) == len(tasks) - len(cancelled) - sum(t.expiration_ms == 400 for t in tasks)

    fired: dict[int, list[int]] = {}
    run_clock(timer, fired, range(401, 420))
    assert timer.staged == 0  # all back in the wheels before any of them was due
    run_clock(timer, fired, range(420, 800))
    assert len(timer) == 0
    for task in tasks:
        if task in cancelled:
            assert id(task) not in fired
        elif task.expiration_ms > 400:
            assert fired[id(task)] == [task.expiration_ms]


def test_a_clock_jumping_past_staged_tasks_expires_each_of_them_once():
    timer = TimingWheelTimer(1, 20, start_ms=0)
    tasks = [timer.schedule(400 + n % 400, lambda: None) for n in range(4_000)]
    timer.advance(400)
    assert timer.staged > 0
    expired = timer.advance(5_000)
    assert sorted(t.expiration_ms for t in expired) == sorted(
        t.expiration_ms for t in tasks if t.expiration_ms > 400
    )
    assert len({id(t) for t in expired}) == len(expired)
    assert timer.staged == 0
    assert len(timer) == 0
    assert timer.next_expiration_ms() is None


def test_a_task_added_already_due_fires_on_the_next_advance():
    timer = TimingWheelTimer(1, 20, start_ms=1_000)
    late = timer.schedule(500, lambda: None)
    assert timer.next_expiration_ms() == 1_000
    assert timer.advance(1_000) == [late]
    cancelled = timer.schedule(999, lambda: None)
    cancelled.cancel()
    assert timer.advance(1_001) == []


def test_tick_and_wheel_size_are_checked():
    with pytest.raises(ValueError, match="tick_ms"):
        TimingWheelTimer(0, 20)
    with pytest.raises(ValueError, match="wheel_size"):
        TimingWheelTimer(1, 1)
    assert isinstance(ScheduledCall(5, lambda: None), TimerTask)


class Clock:
    def __init__(self):
        self.now_s = 100.0

    def __call__(self):
        return self.now_s


class Op(DelayedOperation):
    def __init__(self, delay_ms, log):
        super().__init__(delay_ms)
        self.ready = False
        self.log = log

    def try_complete(self):
        return self.ready and self.force_complete()

    def on_complete(self):
        self.log.append(("complete", id(self)))

    def on_expiration(self):
        self.log.append(("expire", id(self)))


async def test_purgatory_100k_operations_complete_or_expire_exactly_once():
    clock = Clock()
    purgatory = DelayedOperationPurgatory("fetch", tick_ms=1, wheel_size=20, clock=clock)
    log: list[tuple[str, int]] = []
    rng = random.Random(7)
    ops = [Op(rng.randrange(1, 30_000), log) for _ in range(N)]
    for number, op in enumerate(ops):
        assert purgatory.try_complete_else_watch(op, [number % 1_000]) is False
    assert purgatory.delayed == N
    assert purgatory.watched == N

    # Half become ready; completing by key completes each once, twice is a no-op.
    for op in ops[::2]:
        op.ready = True
    completed = sum(purgatory.check_and_complete(key) for key in range(1_000))
    assert completed == N // 2
    assert sum(purgatory.check_and_complete(key) for key in range(1_000)) == 0
    assert purgatory.delayed == N // 2

    # The others expire at their delay: never before it, and all once the clock
    # passed the longest delay.
    expired_at: dict[int, float] = {}
    start = clock.now_s
    for step_ms in range(0, 30_001, 250):
        clock.now_s = start + step_ms / 1000
        before = len(log)
        purgatory.advance_clock()
        for kind, op_id in log[before:]:
            if kind == "expire":
                expired_at[op_id] = step_ms
    for op in ops[1::2]:
        assert op.delay_ms <= expired_at[id(op)] < op.delay_ms + 250
        op.ready = True
        assert op.try_complete() is False  # already completed by expiry
    kinds = [kind for kind, _ in log]
    assert kinds.count("complete") == N
    assert kinds.count("expire") == N // 2
    assert len({op_id for kind, op_id in log if kind == "complete"}) == N
    assert purgatory.expired == N // 2
    assert purgatory.delayed == 0
    assert purgatory.watched == 0
    await purgatory.close()


async def test_reaper_expires_on_the_real_loop_and_close_expires_the_rest():
    purgatory = DelayedOperationPurgatory("fetch", tick_ms=1, wheel_size=20)
    purgatory.start()
    log: list[tuple[str, int]] = []
    soon, later = Op(20, log), Op(60_000, log)
    purgatory.try_complete_else_watch(later, ["a"])
    purgatory.try_complete_else_watch(soon, ["a"])  # earlier than the reaper's sleep
    await eventually(lambda: log, interval_s=0.01)
    assert log == [("complete", id(soon)), ("expire", id(soon))]
    await purgatory.close()
    assert log[2:] == [("complete", id(later)), ("expire", id(later))]
