"""One retry policy for every cloud backend's calls, and ranged reads that resume.

Throttling, 5xx, timeouts and dropped connections are retried with exponential
backoff and jitter until the caller's deadline (remotelog.core.deadline); each
cloud library's own retries are off, so there is one policy, bounded by it. What
a backend's library raises comes out as remotelog's errors.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from remotelog.core.backoff import ExponentialBackoff, retry_async
from remotelog.core.deadline import current_deadline
from remotelog.core.errors import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RetriableRemoteStorageError,
)

T = TypeVar("T")


def content_md5(md5: str) -> str:
    """Content-MD5's form (base64) of a lowercase hex MD5."""
    return base64.b64encode(bytes.fromhex(md5)).decode()


@dataclass(frozen=True)
class CallPolicy:
    """How a backend's calls are retried, and what its library's errors become."""

    where: str  # the bucket or container as a URL, for messages: s3://bucket
    backoff: ExponentialBackoff
    is_transient: Callable[[BaseException], bool]
    # A library error (or a transport one) as RemoteResourceNotFoundError,
    # RetriableRemoteStorageError or RemoteStorageError.
    translate: Callable[[BaseException, str], Exception]
    # What `translate` takes; anything else passes through untouched.
    errors: tuple[type[BaseException], ...]
    # Retries without a caller deadline stop after this long.
    default_retry_s: float = 60.0


def storage_error(
    exc: BaseException, what: str, *, not_found: bool, transient: bool, detail: str = ""
) -> Exception:
    """What a backend's failure on `what` is to the store."""
    if not_found:
        return RemoteResourceNotFoundError(f"{what}: not found")
    kind = RetriableRemoteStorageError if transient else RemoteStorageError
    return kind(f"{what}: {type(exc).__name__}: {detail or exc}")


class Calls:
    def __init__(self, policy: CallPolicy) -> None:
        self.policy = policy
        self.closed = False

    def deadline(self) -> float:
        """The caller's deadline, or default_retry_s from now when it set none."""
        return current_deadline() or time.monotonic() + self.policy.default_retry_s

    def failure(self, exc: BaseException, what: str) -> Exception:
        return self.policy.translate(exc, f"{self.policy.where}/{what}")

    async def __call__(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Run one call with the retry policy; failures come out translated."""
        policy = self.policy

        def attempt() -> Awaitable[T]:
            if self.closed:
                raise RemoteStorageError(f"{policy.where}/{what}: the store is closed")
            return operation()

        try:
            return await retry_async(
                attempt,
                backoff=policy.backoff,
                is_retriable=policy.is_transient,
                deadline=self.deadline(),
            )
        except policy.errors as exc:
            raise self.failure(exc, what) from None


class RangeBody(Protocol):
    """The body of one ranged GET as it arrives."""

    length: int  # bytes the answer says it carries

    def chunks(self, chunk_size: int) -> AsyncGenerator[bytes, None]:
        """The body in chunks of exactly `chunk_size` bytes (the last may be shorter)."""
        ...

    def close(self) -> None: ...


async def resuming_read(
    calls: Calls,
    key: str,
    start: int,
    end: int | None,
    chunk_size: int,
    get_range: Callable[[int, int | None], Awaitable[RangeBody | None]],
) -> AsyncGenerator[bytes, None]:
    """Bytes `start`..`end` (inclusive) of `key` by ranged GETs: a connection dropped
    mid-body resumes from the byte it reached, after a backoff, until the deadline.
    `get_range` answers None when the range starts past the object's end."""
    position = start
    deadline = calls.deadline()
    failures = 0
    while end is None or position <= end:
        body = await calls(key, partial(get_range, position, end))
        if body is None:
            return
        expected = position + body.length
        try:
            async with contextlib.aclosing(body.chunks(chunk_size)) as chunks:
                async for chunk in chunks:
                    position += len(chunk)
                    yield chunk
            if position < expected:
                raise ConnectionError(f"body ended at {position} of {expected} bytes")
            return
        except calls.policy.errors as exc:
            if not calls.policy.is_transient(exc):
                raise calls.failure(exc, key) from None
            delay = calls.policy.backoff.backoff_ms(failures) / 1000
            failures += 1
            if time.monotonic() + delay >= deadline:
                raise calls.failure(exc, key) from None
            await asyncio.sleep(delay)
        finally:
            body.close()


class StreamBody:
    """A ranged GET's body on an aiohttp stream (S3's and GCS's)."""

    def __init__(self, length: int, stream: Any) -> None:
        self.length = length
        self._stream = stream

    def chunks(self, chunk_size: int) -> AsyncGenerator[bytes, None]:
        # aiohttp's StreamReader: readexactly avoids re-buffering
        return exact_chunks(self._stream.content.readexactly, chunk_size)

    def close(self) -> None:
        self._stream.close()


async def exact_chunks(
    read_exactly: Callable[[int], Awaitable[bytes]], chunk_size: int
) -> AsyncGenerator[bytes, None]:
    """Chunks of exactly `chunk_size` from an aiohttp-style `readexactly` (the last may
    be shorter): no re-buffering of what the stream already holds."""
    while True:
        try:
            chunk = await read_exactly(chunk_size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                yield bytes(exc.partial)
            return
        yield chunk
