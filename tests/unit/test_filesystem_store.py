"""FileSystemStore: the chunks its reads give, and its thread hops (nothing abandoned leaks)."""

import asyncio
import os
import threading

import pytest
from support.waiting import eventually

from remotelog.segmentstore import filesystem
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


RANGES = [
    (0, None),
    (5_000, 17 * 1024 * 1024 + 7),  # unaligned start, across two 8 MiB blocks
    (8 * 1024 * 1024 - 3, 8 * 1024 * 1024 + 10),  # straddles a block boundary
    (20 * 1024 * 1024 + 100, None),  # the last bytes only
    (3 * 1024 * 1024, 10**12),  # an end past the object's end is its end
]


async def _read(store: FileSystemStore, start: int, end: int | None, chunk_size: int) -> list:
    return [chunk async for chunk in store.read("t-x/0/segment.log", start, end, chunk_size)]


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "pread"])
async def test_long_reads_give_the_range_in_chunks_of_the_asked_size(tmp_path, monkeypatch, mapped):
    if mapped and filesystem._MAP_POPULATE is None:
        pytest.skip("no MAP_POPULATE here")
    if not mapped:
        monkeypatch.setattr(filesystem, "_MAP_POPULATE", None)
    data = os.urandom(20 * 1024 * 1024 + 123)
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    await store.put("t-x/0/segment.log", data)
    for chunk_size in (1024 * 1024, 3 * 1024 * 1024 + 1):
        for start, end in RANGES:
            chunks = await _read(store, start, end, chunk_size)
            stop = len(data) if end is None else min(end + 1, len(data))
            assert b"".join(chunks) == data[start:stop], (chunk_size, start, end)
            assert all(len(c) == chunk_size for c in chunks[:-1])
            if end is None or end - start >= filesystem.CACHED_READ_MAX:
                # Mapped: views of the file's pages, copied by nobody here; else bytes.
                assert all(isinstance(c, memoryview if mapped else bytes) for c in chunks)
    await store.close()


async def test_mapped_pages_are_unmapped_once_the_chunks_are_dropped(tmp_path):
    if filesystem._MAP_POPULATE is None:
        pytest.skip("no MAP_POPULATE here")
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    await store.put("t-x/0/segment.log", os.urandom(12 * 1024 * 1024))
    path = str(store.path("t-x/0/segment.log"))

    def mappings() -> int:
        with open("/proc/self/maps") as maps:
            return sum(path in line for line in maps)

    chunks = await _read(store, 0, None, 1024 * 1024)
    assert mappings() == 2  # one mapping per 8 MiB block, held by its views
    del chunks
    assert mappings() == 0
    await store.close()
