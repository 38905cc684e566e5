"""FileSystemStore's thread hops: a result nobody waits for any more is released, not leaked."""

import asyncio
import os
import threading

import pytest
from support.waiting import eventually

from remotelog.segmentstore.filesystem import FileSystemStore


async def test_a_result_its_caller_abandoned_is_released(tmp_path):
    store = FileSystemStore(tmp_path / "store", io_threads=1)
    started, finish = threading.Event(), threading.Event()
    released: list[int] = []

    def opening() -> int:
        started.set()
        finish.wait(5)
        return 42

    task = asyncio.create_task(store._run(opening, released.append))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    finish.set()
    await eventually(lambda: released)
    assert released == [42]
    await store.close()


async def test_reads_cancelled_at_any_point_leave_no_descriptor_open(tmp_path):
    store = FileSystemStore(tmp_path / "store", io_threads=4)
    await store.put("t-x/0/segment.log", os.urandom(3 * 1024 * 1024))
    before = len(os.listdir("/proc/self/fd"))

    async def read_some(chunks: int) -> None:
        taken = 0
        async for _ in store.read("t-x/0/segment.log", 0, None, 1024 * 1024):
            taken += 1
            if taken == chunks:
                return

    for number in range(60):
        task = asyncio.create_task(read_some(number % 4))
        await asyncio.sleep(0 if number % 2 else 0.0005)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Reader threads close what they opened after the cancellation reaches them.
    await eventually(lambda: len(os.listdir("/proc/self/fd")) == before)
    assert len(os.listdir("/proc/self/fd")) == before
    await store.close()
