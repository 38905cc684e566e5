"""cancel_and_wait stops tasks even when one loses a cancellation."""

import asyncio

from remotelog.core.tasks import cancel_and_wait


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
