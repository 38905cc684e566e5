"""Task and stream helpers: cancel_and_wait, in_thread_until_cancelled, read_ahead,
stream_within, BatchedCalls."""

import asyncio
import threading
import time
from collections.abc import AsyncGenerator

import pytest

from remotelog.core.deadline import current_deadline, stream_within
from remotelog.core.tasks import (
    BatchedCalls,
    bounded_gather,
    cancel_and_wait,
    in_thread_until_cancelled,
    read_ahead,
)


async def test_a_task_that_swallows_its_first_cancellation_is_cancelled_again():
    cancellations = 0

    async def stubborn():
        nonlocal cancellations
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancellations += 1
                if cancellations == 1:
                    continue  # what 3.11's wait_for can do to a loop
                raise

    async def failing():
        raise RuntimeError("broken while running")

    tasks = [asyncio.create_task(stubborn()), asyncio.create_task(failing())]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks, recancel_s=0.05)
    assert tasks[0].cancelled()
    assert cancellations == 2
    assert isinstance(tasks[1].exception(), RuntimeError)


async def test_stream_within_sets_the_deadline_only_while_the_source_runs() -> None:
    seen: list[float | None] = []

    async def source() -> AsyncGenerator[int, None]:
        for number in range(3):
            seen.append(current_deadline())
            yield number

    began = time.monotonic()
    items = []
    async for item in stream_within(5.0, source()):
        assert current_deadline() is None  # the consumer's context is left alone
        items.append(item)
    assert items == [0, 1, 2]
    assert all(d is not None and began + 4.5 <= d <= time.monotonic() + 5 for d in seen)
    assert len(set(seen)) == 1  # one deadline for the whole stream


async def test_read_ahead_keeps_order_delivers_errors_in_place_and_stops_its_task() -> None:
    async def source() -> AsyncGenerator[int, None]:
        yield 1
        yield 2
        raise ValueError("source failed")

    ahead = read_ahead(source(), 1)
    assert [await anext(ahead), await anext(ahead)] == [1, 2]
    with pytest.raises(ValueError, match="source failed"):
        await anext(ahead)

    async def endless() -> AsyncGenerator[int, None]:
        number = 0
        while True:
            number += 1
            yield number

    ahead = read_ahead(endless(), 2)
    assert [await anext(ahead), await anext(ahead)] == [1, 2]
    await ahead.aclose()
    assert not [
        t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "read_ahead.<locals>.pump"
    ]


async def test_batched_calls_share_worker_hops_and_answer_each_caller_alone() -> None:
    threads: dict[int, int] = {}

    def square(n: int) -> int:
        threads[n] = threading.get_ident()
        if n == 13:
            raise ValueError("13 is refused")
        return n * n

    calls = BatchedCalls(square, max_batch=8)
    results = await asyncio.gather(*(calls(n) for n in range(20)), return_exceptions=True)

    assert results[:13] == [n * n for n in range(13)]
    assert isinstance(results[13], ValueError)
    assert str(results[13]) == "13 is refused"
    assert results[14:] == [n * n for n in range(14, 20)]
    assert calls.hops == 3  # 20 concurrent calls, 8 per hop
    assert threading.get_ident() not in threads.values()  # never on the event loop's thread
    assert await calls(3) == 9  # a later call starts a new hop
    assert calls.hops == 4


async def test_a_cancelled_batched_call_leaves_the_others_their_answers() -> None:
    release = threading.Event()

    def slow(n: int) -> int:
        release.wait(5)
        return n + 100

    calls = BatchedCalls(slow)
    tasks = [asyncio.create_task(calls(n)) for n in range(3)]
    await asyncio.sleep(0.05)  # the hop is running
    tasks[1].cancel()
    release.set()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert (done[0], done[2]) == (100, 102)
    assert isinstance(done[1], asyncio.CancelledError)
    assert calls.hops == 1


async def test_a_cancelled_thread_call_is_told_to_stop_and_waited_for():
    seen: list[str] = []

    def wait_for_broker(*, stopped: threading.Event) -> str:
        stopped.wait()
        seen.append("stopped")
        return "never used"

    call = asyncio.ensure_future(in_thread_until_cancelled(wait_for_broker))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert seen == ["stopped"]  # the thread had returned before the cancellation ended


async def test_a_thread_call_returns_what_the_function_returns():
    def describe(topic: str, *, partitions: int, stopped: threading.Event) -> tuple[str, int]:
        assert not stopped.is_set()
        return topic, partitions

    assert await in_thread_until_cancelled(describe, "t", partitions=3) == ("t", 3)


async def test_bounded_gather_runs_every_call_at_most_limit_at_a_time():
    running, most, done = 0, 0, []

    def call(number: int):
        async def run() -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.001 * (number % 3))
            running -= 1
            done.append(number)

        return run

    await bounded_gather((call(n) for n in range(50)), 4)
    assert sorted(done) == list(range(50))
    assert most == 4


async def test_bounded_gather_raises_the_first_failure_as_it_is_and_stops_the_rest():
    started, cancelled = [], []

    def call(number: int):
        async def run() -> None:
            started.append(number)
            if number == 2:
                raise ValueError("segment 2")
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(number)
                raise

        return run

    with pytest.raises(ValueError, match="segment 2"):
        await bounded_gather((call(n) for n in range(10)), 3)
    assert started == [0, 1, 2]
    assert sorted(cancelled) == [0, 1]
