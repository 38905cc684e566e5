"""DelayedRemoteFetch: a Fetch waiting in the purgatory for its partitions' remote reads.

It completes when every read finished, or when the wait expires: then the
finished partitions answer with their data and the others with empty records
and no error (Kafka's behaviour: the consumer simply fetches again), and the
unfinished reads are cancelled so no worker keeps reading for nobody.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from remotelog.core.metrics import REMOTE_FETCH_EXPIRES, Instruments
from remotelog.core.purgatory import DelayedOperation

Outcome = tuple[str, Any]  # ("data", value) | ("error", exception) | ("expired", None)


class DelayedRemoteFetch(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        reads: Sequence[asyncio.Future[Any]],
        respond: Callable[[list[Outcome]], None],
        metrics: Instruments,
    ) -> None:
        super().__init__(delay_ms)
        self.reads = list(reads)
        self._respond = respond
        self._metrics = metrics

    def try_complete(self) -> bool:
        return all(read.done() for read in self.reads) and self.force_complete()

    def on_complete(self) -> None:
        outcomes: list[Outcome] = []
        for read in self.reads:
            if not read.done() or read.cancelled():
                outcomes.append(("expired", None))
            elif read.exception() is not None:
                outcomes.append(("error", read.exception()))
            else:
                outcomes.append(("data", read.result()))
        self._respond(outcomes)

    def on_expiration(self) -> None:
        self._metrics.add(REMOTE_FETCH_EXPIRES, 1)
        self.cancel_reads()

    def cancel_reads(self) -> None:
        for read in self.reads:
            read.cancel()
