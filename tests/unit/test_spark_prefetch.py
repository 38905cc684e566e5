"""A Spark task's batches made one ahead in a thread: the same items in the same order,
the producer's error in its place, and an early stop that ends the producer."""

import threading
import time
from collections.abc import Iterator

import pytest

from remotelog.spark.prefetch import prefetched


class Source:
    """Items 0..count-1, recording how far the producer got and whether it was closed."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count, self.fail_at = count, fail_at
        self.made: list[int] = []
        self.closed = threading.Event()
        self.threads: set[str] = set()

    def items(self) -> Iterator[int]:
        try:
            for i in range(self.count):
                if i == self.fail_at:
                    raise ValueError(f"item {i} is corrupt")
                self.threads.add(threading.current_thread().name)
                self.made.append(i)
                yield i
        finally:
            self.closed.set()


@pytest.mark.parametrize("ahead", [1, 3])
def test_every_item_arrives_in_order_made_in_another_thread(ahead: int) -> None:
    source = Source(1000)
    assert list(prefetched(source.items(), ahead)) == list(range(1000))
    assert source.threads == {"remotelog-prefetch"}
    assert source.closed.is_set()


def test_the_producer_runs_at_most_ahead_items_before_the_caller() -> None:
    source = Source(100)
    items = prefetched(source.items(), ahead=2)
    assert next(items) == 0
    # 0 taken, 1 and 2 waiting in the hand-off, 3 made and waiting for room.
    give_up = time.monotonic() + 5
    while len(source.made) < 4 and time.monotonic() < give_up:
        time.sleep(0.01)
    time.sleep(0.1)  # time enough to make more, if it would
    assert source.made == [0, 1, 2, 3]
    items.close()


def test_an_error_in_the_producer_is_raised_after_the_items_before_it() -> None:
    source = Source(10, fail_at=4)
    got: list[int] = []
    with pytest.raises(ValueError, match="item 4 is corrupt"):
        got.extend(prefetched(source.items()))
    assert got == [0, 1, 2, 3]
    assert source.closed.is_set()


def test_a_caller_that_stops_early_stops_and_closes_the_producer() -> None:
    source = Source(1_000_000)
    items = prefetched(source.items(), ahead=1)
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    items.close()  # what Spark does to a task's iterator when a LIMIT is reached
    assert source.closed.is_set()
    assert len(source.made) <= 5
    assert not [t for t in threading.enumerate() if t.name == "remotelog-prefetch"]
