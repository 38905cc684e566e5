"""The lease implementation a service's config asks for."""

from __future__ import annotations

from remotelog.coordination.lease import InProcessLeases, Leases
from remotelog.coordination.redis_leases import RedisLeases


def open_leases(redis_url: str) -> Leases:
    """Redis leases when `redis.url` is set (several instances), else in-process ones."""
    return RedisLeases(redis_url) if redis_url else InProcessLeases()
