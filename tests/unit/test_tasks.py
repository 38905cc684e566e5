"""Task and stream helpers: cancel_and_wait, read_ahead, stream_within."""

import asyncio
import time
from collections.abc import AsyncGenerator

import pytest

from remotelog.core.deadline import current_deadline, stream_within
from remotelog.core.tasks import cancel_and_wait, read_ahead


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
