import random

import pytest

from remotelog.core.backoff import ExponentialBackoff, retry_async
from remotelog.core.errors import InvalidArgumentError, RetriableRemoteStorageError


def test_without_jitter_grows_by_the_multiplier_up_to_the_max():
    backoff = ExponentialBackoff(initial_ms=100, max_ms=1000, multiplier=2, jitter=0)
    assert [backoff.backoff_ms(n) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert backoff.backoff_ms(10_000) == 1000


def test_jitter_stays_within_its_fraction():
    backoff = ExponentialBackoff(initial_ms=500, max_ms=30_000, jitter=0.2, rng=random.Random(7))
    for attempt in range(5):
        term = 500 * 2**attempt
        values = {backoff.backoff_ms(attempt) for _ in range(200)}
        assert min(values) >= term * 0.8
        assert max(values) <= term * 1.2
        assert len(values) > 100  # it really is random


def test_initial_above_max_is_capped_like_kafka():
    backoff = ExponentialBackoff(initial_ms=5000, max_ms=1000, jitter=0.5)
    assert backoff.backoff_ms(0) == 1000
    assert backoff.backoff_ms(3) == 1000


@pytest.mark.parametrize(
    "kwargs", [{"initial_ms": -1}, {"multiplier": 0.5}, {"jitter": 1.5}, {"jitter": -0.1}]
)
def test_invalid_parameters(kwargs):
    with pytest.raises(ValueError, match="backoff"):
        ExponentialBackoff(**{"initial_ms": 1, "max_ms": 10, **kwargs})


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    async def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


async def test_retry_until_success_sleeping_the_backoff():
    clock = FakeClock()
    calls = []

    async def flaky():
        calls.append(clock.now)
        if len(calls) < 4:
            raise RetriableRemoteStorageError("503 Slow Down")
        return "done"

    backoff = ExponentialBackoff(initial_ms=100, max_ms=1000, jitter=0)
    result = await retry_async(
        flaky,
        backoff=backoff,
        is_retriable=lambda e: getattr(e, "retriable", False),
        clock=clock,
        sleep=clock.sleep,
    )
    assert result == "done"
    assert clock.sleeps == [0.1, 0.2, 0.4]


async def test_retry_stops_at_the_deadline_with_the_last_error():
    clock = FakeClock()

    async def down():
        raise RetriableRemoteStorageError("connection reset")

    backoff = ExponentialBackoff(initial_ms=100, max_ms=1000, jitter=0)
    with pytest.raises(RetriableRemoteStorageError, match="connection reset"):
        await retry_async(
            down,
            backoff=backoff,
            is_retriable=lambda e: True,
            deadline=1.0,
            clock=clock,
            sleep=clock.sleep,
        )
    # 0.1 + 0.2 + 0.4 = 0.7; the next 0.8 s wait would end past the 1.0 s deadline.
    assert clock.sleeps == [0.1, 0.2, 0.4]


async def test_non_retriable_errors_are_raised_at_once():
    clock = FakeClock()
    calls = 0

    async def bad():
        nonlocal calls
        calls += 1
        raise InvalidArgumentError("offset", "negative")

    with pytest.raises(InvalidArgumentError):
        await retry_async(
            bad,
            backoff=ExponentialBackoff(initial_ms=1, max_ms=10),
            is_retriable=lambda e: getattr(e, "retriable", False),
            clock=clock,
            sleep=clock.sleep,
        )
    assert calls == 1
    assert clock.sleeps == []
