"""Waiting for a condition in tests that run against real, asynchronous services."""

import asyncio
import time


async def eventually(check, timeout_s: float = 30, interval_s: float = 0.05, why=None):
    """Poll an async or plain check until it returns a truthy value; that value.

    `why`, if given, is called when the time is up: what it returns (the state the
    check was waiting on) goes into the failure message.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            shown = f"\n{why()}" if why is not None else ""
            raise AssertionError(f"condition not met within {timeout_s} s: {check}{shown}")
        await asyncio.sleep(interval_s)
