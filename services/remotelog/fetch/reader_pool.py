"""The RemoteLogReader pool: `remote.log.reader.threads` workers over a bounded queue.

Reads are asyncio coroutines (they wait on the segment store, not on a CPU),
so a worker is a task, not a thread; the bound is the same as Kafka's: at
most `threads` reads run, at most `max_pending` wait, and a submission that
would overflow the queue is refused at once (READER_QUEUE_FULL) instead of
piling up. A read whose caller gave up (its future cancelled: the fetch
expired) is cancelled where it runs, or skipped if it has not started, and
its worker moves on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from remotelog.core.errors import ReaderQueueFullError
from remotelog.core.tasks import cancel_and_wait


def _cancel_when_abandoned(task: asyncio.Future[Any]) -> Callable[[asyncio.Future[Any]], None]:
    def on_done(future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            task.cancel()

    return on_done


Job = tuple[Callable[[], Awaitable[Any]], "asyncio.Future[Any]"]


class ReaderPool:
    def __init__(self, threads: int, max_pending: int) -> None:
        self.threads = threads
        self.max_pending = max_pending
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self.busy = 0
        self._busy_s = 0.0
        self._window_start = time.monotonic()

    def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"remote-log-reader-{n}")
            for n in range(self.threads)
        ]

    async def close(self) -> None:
        await cancel_and_wait(self._workers)
        self._workers = []
        while not self._queue.empty():
            _, future = self._queue.get_nowait()
            future.cancel()

    @property
    def queue_size(self) -> int:
        """Reads waiting for a worker (Kafka's RemoteLogReaderTaskQueueSize)."""
        return self._queue.qsize()

    def submit_all(self, reads: list[Callable[[], Awaitable[Any]]]) -> list[asyncio.Future[Any]]:
        """Queue every read or none: a fetch is refused whole when the queue cannot take it.

        As in Kafka's executor, a read an idle worker takes at once does not
        wait in the queue; only the rest count against `max_pending`.
        """
        idle = self.threads - self.busy
        waiting = self._queue.qsize()
        if waiting + len(reads) - idle > self.max_pending:
            raise ReaderQueueFullError(
                f"the remote log reader queue holds {max(waiting - idle, 0)} of "
                f"{self.max_pending} reads; {len(reads)} more do not fit",
                metadata={"pending": str(waiting), "max": str(self.max_pending)},
            )
        loop = asyncio.get_running_loop()
        futures = []
        for read in reads:
            future: asyncio.Future[Any] = loop.create_future()
            self._queue.put_nowait((read, future))
            futures.append(future)
        return futures

    def idle_percent(self) -> float:
        """Share of worker time spent idle since the last call (RemoteLogReaderAvgIdlePercent)."""
        now = time.monotonic()
        window = (now - self._window_start) * self.threads
        busy = self._busy_s
        self._busy_s, self._window_start = 0.0, now
        return 100.0 if window <= 0 else max(0.0, 100.0 * (1 - busy / window))

    async def _work(self) -> None:
        while True:
            read, future = await self._queue.get()
            if future.done():
                continue  # its fetch completed or expired while it waited
            started = time.monotonic()
            self.busy += 1
            task = asyncio.ensure_future(read())
            future.add_done_callback(_cancel_when_abandoned(task))
            try:
                result = await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.done():  # the worker itself is stopping
                    task.cancel()
                    raise
                if not future.done():
                    future.cancel()
            except Exception as exc:
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(result)
            finally:
                self.busy -= 1
                self._busy_s += time.monotonic() - started
