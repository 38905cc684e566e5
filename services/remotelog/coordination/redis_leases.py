"""Leases in Redis: SET NX PX to take, Lua compare-and-extend to renew, compare-and-delete to free.

The value of `lease:<name>` is `<owner> <fencing token>`; the token comes from
INCR on `lease:<name>:fence` in the same script as the SET, so every grant of
a name has a larger token than the one before, across all instances.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from remotelog.coordination.lease import Lease
from remotelog.core.errors import ServiceUnavailableError

_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'NX', 'PX', ARGV[2])
return token
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLeases:
    shared = True

    def __init__(
        self, url: str, *, prefix: str = "remotelog:lease:", timeout_s: float = 5.0
    ) -> None:
        # Bounded calls: a Redis that hangs (stopped, partitioned) is a retriable error
        # after `timeout_s`, never a task that waits on it forever.
        self._redis: Any = aioredis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._prefix = prefix
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._renew = self._redis.register_script(_RENEW)
        self._release = self._redis.register_script(_RELEASE)

    def _key(self, name: str) -> str:
        return self._prefix + name

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        key = self._key(name)
        with _unavailable():
            token = int(await self._acquire(keys=[key, key + ":fence"], args=[owner, ttl_ms]))
        return Lease(name, owner, token, ttl_ms) if token else None

    async def renew(self, lease: Lease) -> bool:
        value = f"{lease.owner} {lease.fencing_token}"
        with _unavailable():
            renewed = bool(
                await self._renew(keys=[self._key(lease.name)], args=[value, lease.ttl_ms])
            )
        if not renewed:
            lease.lost.set()
        return renewed

    async def release(self, lease: Lease) -> None:
        value = f"{lease.owner} {lease.fencing_token}"
        with _unavailable():
            await self._release(keys=[self._key(lease.name)], args=[value])

    async def holder(self, name: str) -> str | None:
        with _unavailable():
            value = await self._redis.get(self._key(name))
        # `<owner> <fencing token>`: owners may hold spaces, tokens do not.
        return None if value is None else value.decode().rsplit(" ", 1)[0]

    async def holders(self, prefix: str) -> dict[str, str]:
        with _unavailable():
            keys = [
                key
                async for key in self._redis.scan_iter(
                    match=_glob(self._key(prefix)) + "*", count=1000
                )
                if not key.endswith(b":fence")
            ]
            values = await self._redis.mget(keys) if keys else []
        start = len(self._prefix)
        return {
            key.decode()[start:]: value.decode().rsplit(" ", 1)[0]
            for key, value in zip(keys, values, strict=True)
            if value is not None  # expired between the scan and the read
        }

    async def close(self) -> None:
        await self._redis.aclose()


def _glob(literal: str) -> str:
    """`literal` as a SCAN pattern that matches only itself."""
    return "".join("\\" + c if c in "*?[]\\^" else c for c in literal)


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """Redis down or restarting (a dropped connection, a refused one, a timeout) is a
    retriable error of ours, which the tasks retry with backoff, not an unknown fault."""
    try:
        yield
    except RedisError as exc:
        raise ServiceUnavailableError(f"redis: {exc}") from None
