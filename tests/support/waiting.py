"""Waiting for a condition in tests that run against real, asynchronous services."""

import asyncio
import time


async def eventually(check, timeout_s: float = 30, interval_s: float = 0.05):
    """Poll an async or plain check until it returns a truthy value; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s: {check}")
        await asyncio.sleep(interval_s)
