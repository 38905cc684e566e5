"""The remote index cache's shared second level in Redis.

One hash per segment, `remotelog:index-cache:<segment uuid>`, with a field per
index file, written in one MULTI with its expiry so a reader sees all of an
entry or none of it. Several fetch instances then fetch each segment's indexes
from the store once between them.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis


class RedisIndexFiles:
    def __init__(self, url: str, ttl_ms: int, *, prefix: str = "remotelog:index-cache:") -> None:
        self._redis: Any = aioredis.from_url(url, socket_timeout=2.0)
        self._ttl_ms = ttl_ms
        self._prefix = prefix

    async def get(self, key: str) -> dict[str, bytes] | None:
        fields = await self._redis.hgetall(self._prefix + key)
        if not fields:
            return None
        return {name.decode(): value for name, value in fields.items()}

    async def put(self, key: str, files: dict[str, bytes]) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._prefix + key, mapping=files)
            pipe.pexpire(self._prefix + key, self._ttl_ms)
            await pipe.execute()

    async def close(self) -> None:
        await self._redis.aclose()
