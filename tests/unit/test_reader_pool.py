"""ReaderPool: the bound on running reads, the queue's refusal, cancellation, and close."""

from __future__ import annotations

import asyncio

import pytest

from remotelog.core.errors import ReaderQueueFullError
from remotelog.fetch.reader_pool import ReaderPool


class Gate:
    """Reads that wait until released, recording which ones started."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.release: dict[str, asyncio.Event] = {}

    def read(self, name: str, result: object = None):  # type: ignore[no-untyped-def]
        self.release[name] = asyncio.Event()

        async def run() -> object:
            self.started.append(name)
            try:
                await self.release[name].wait()
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
            if isinstance(result, Exception):
                raise result
            return result

        return run


def started(threads: int, max_pending: int) -> tuple[ReaderPool, Gate]:
    pool = ReaderPool(threads, max_pending)
    pool.start()
    return pool, Gate()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_at_most_threads_reads_run_and_a_finished_one_starts_the_next():
    pool, gate = started(threads=2, max_pending=5)
    futures = pool.submit_all([gate.read(n, n.upper()) for n in "abcd"])
    await settle()
    assert gate.started == ["a", "b"]
    assert (pool.busy, pool.queue_size) == (2, 2)

    gate.release["b"].set()
    assert await futures[1] == "B"
    await settle()
    assert gate.started == ["a", "b", "c"]
    assert (pool.busy, pool.queue_size) == (2, 1)

    for name in "acd":
        gate.release[name].set()
    assert await asyncio.gather(*futures) == ["A", "B", "C", "D"]
    await settle()
    assert (pool.busy, pool.queue_size) == (0, 0)
    await pool.close()


async def test_a_read_a_free_slot_takes_is_not_counted_as_waiting():
    pool, gate = started(threads=1, max_pending=0)
    (future,) = pool.submit_all([gate.read("a", 1)])
    # Running already: the free slot took it, no queue entry counted against max_pending.
    assert (pool.busy, pool.queue_size) == (1, 0)
    gate.release["a"].set()
    assert await future == 1
    await pool.close()


async def test_a_submission_that_overflows_the_queue_is_refused_whole():
    pool, gate = started(threads=1, max_pending=1)
    first = pool.submit_all([gate.read("a"), gate.read("b")])  # one runs, one waits
    with pytest.raises(ReaderQueueFullError) as info:
        pool.submit_all([gate.read("c")])
    assert info.value.metadata == {"pending": "1", "max": "1"}
    assert pool.queue_size == 1  # nothing of the refused fetch was queued
    for name in "ab":
        gate.release[name].set()
    await asyncio.gather(*first)
    await settle()
    assert gate.started == ["a", "b"]
    await pool.close()


async def test_a_failed_read_fails_its_future_only():
    pool, gate = started(threads=2, max_pending=2)
    bad, good = pool.submit_all([gate.read("a", ValueError("broken")), gate.read("b", 2)])
    gate.release["a"].set()
    gate.release["b"].set()
    with pytest.raises(ValueError, match="broken"):
        await bad
    assert await good == 2
    await pool.close()


async def test_an_abandoned_read_is_cancelled_where_it_runs_and_a_queued_one_never_starts():
    pool, gate = started(threads=1, max_pending=2)
    running, queued, last = pool.submit_all([gate.read(n) for n in "abc"])
    await settle()
    queued.cancel()  # its fetch expired while it waited
    running.cancel()
    await settle()
    assert gate.cancelled == ["a"]
    assert gate.started == ["a", "c"]  # b was skipped
    gate.release["c"].set()
    await last
    await pool.close()


async def test_close_cancels_running_and_queued_reads():
    pool, gate = started(threads=1, max_pending=2)
    running, queued = pool.submit_all([gate.read("a"), gate.read("b")])
    await settle()
    await pool.close()
    assert running.cancelled()
    assert queued.cancelled()
    assert gate.cancelled == ["a"]
    assert (pool.busy, pool.queue_size) == (0, 0)


async def test_close_cancels_a_read_whose_task_had_not_begun():
    pool, gate = started(threads=1, max_pending=0)
    (future,) = pool.submit_all([gate.read("a")])
    await pool.close()  # before the loop ran the read's first step
    assert future.cancelled()
    assert gate.started == []


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


async def test_idle_percent_counts_the_time_slots_were_reading(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("remotelog.fetch.reader_pool.time", clock)
    pool, gate = started(threads=2, max_pending=0)
    (future,) = pool.submit_all([gate.read("a")])
    await settle()
    clock.now += 1.0
    gate.release["a"].set()
    await future
    clock.now += 1.0
    # One of two slots read for one second of two: 75% idle, then a fresh window.
    assert pool.idle_percent() == 75.0
    clock.now += 1.0
    assert pool.idle_percent() == 100.0
    await pool.close()
