"""Small asyncio helpers shared by the services."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], *, recancel_s: float = 1.0) -> None:
    """Cancel the tasks and wait until every one has finished, whatever it raised.

    Tasks still running after `recancel_s` are cancelled again: on Python 3.11
    `asyncio.wait_for` can swallow a cancellation that races with its inner
    future completing (gh-86296), and a service loop that lost its only
    cancellation would keep running while its owner waits for it forever.
    """
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        done, pending = await asyncio.wait(pending, timeout=recancel_s)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: an error while stopping is not news
