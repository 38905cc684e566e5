"""An iterator's items made one step ahead in a thread of their own."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


def prefetched(items: Iterator[T], ahead: int = 1) -> Iterator[T]:
    """`items`, produced in a thread up to `ahead` items before the caller takes them.

    A Spark task hands each Arrow batch to the JVM by a blocking socket write; with
    the fetch and decode of the next batch in another thread (both release the GIL
    for their heavy parts), the two overlap instead of taking turns. An exception in
    the producer is raised to the caller in its place in the sequence; a caller that
    stops early stops the producer and closes `items`.
    """
    handoff: queue.Queue[object] = queue.Queue(maxsize=ahead)
    stopped = threading.Event()

    def put(item: object) -> bool:
        while not stopped.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # whatever it is, the caller raises it
            put(exc)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    producer = threading.Thread(target=produce, name="remotelog-prefetch", daemon=True)
    producer.start()
    try:
        while True:
            item = handoff.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stopped.set()
        producer.join()
