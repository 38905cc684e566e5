"""Leases with fencing tokens: at most one holder of a name at a time, and proof of it.

A copy-scheduler or partition-remover instance takes a partition's lease before
running its task, renews it while running, and calls `Lease.check()` before
each metadata write: a holder that was paused past its expiry (GC, a stalled
host) and lost the lease stops before writing. Each grant of a name carries a
fencing token larger than every earlier grant's, so writes can also be ordered.

`InProcessLeases` serves one process (the embedded default, no Redis);
`remotelog.coordination.redis_leases.RedisLeases` serves several.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from remotelog.core.errors import RemoteLogError

log = logging.getLogger(__name__)


class LeaseLostError(RemoteLogError):
    """The lease expired or was taken over: stop before the next write."""

    reason = "INTERNAL"
    code = "ABORTED"


@dataclass
class Lease:
    """A granted lease. `lost` is set as soon as a renewal finds it gone."""

    name: str
    owner: str
    fencing_token: int
    ttl_ms: int
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    def check(self) -> None:
        """Raise LeaseLostError if the lease was lost; call before each guarded write."""
        if self.lost.is_set():
            raise LeaseLostError(
                f"lease {self.name!r} (fencing token {self.fencing_token}) is no longer held "
                f"by {self.owner}"
            )


class Leases(Protocol):
    # Whether other processes take these leases too (and so learn of a grant only by
    # reading the lease store).
    shared: bool

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        """Take `name` for `ttl_ms` if nobody holds it; None when someone else does."""

    async def renew(self, lease: Lease) -> bool:
        """Extend the lease by its ttl; False (and `lease.lost` set) if it was lost."""

    async def release(self, lease: Lease) -> None:
        """Give the lease up, if still held by this owner."""

    async def holder(self, name: str) -> str | None:
        """Who holds `name` now, or None."""

    async def holders(self, prefix: str) -> dict[str, str]:
        """Every name held now that begins with `prefix`, and who holds it."""

    async def close(self) -> None: ...


@contextlib.asynccontextmanager
async def held(leases: Leases, name: str, owner: str, ttl_ms: int) -> AsyncIterator[Lease | None]:
    """Hold `name` for the body, renewing every ttl/3; yields None when it is taken.

    The body calls `lease.check()` before each write it guards.
    """
    lease = await leases.acquire(name, owner, ttl_ms)
    if lease is None:
        yield None
        return

    done = asyncio.Event()

    async def keep() -> None:
        while not lease.lost.is_set():
            # Told to stop rather than cancelled: a cancel that lands inside a Redis call
            # can be swallowed by the client library, which left this loop renewing forever.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), ttl_ms / 3000)
                return
            # Unreachable for now: try again; the ttl bounds how long the lease lives
            # without renewal, and a holder checks it before each write.
            with contextlib.suppress(RemoteLogError):
                await leases.renew(lease)

    renewer = asyncio.create_task(keep())
    try:
        yield lease
    finally:
        done.set()
        await renewer  # at most one renewal in flight, bounded by the store's timeouts
        if not lease.lost.is_set():
            try:
                await leases.release(lease)
            except RemoteLogError as exc:
                # Not released: it expires at the end of its ttl instead.
                log.info("lease %s not released (%s); it expires in %d ms", name, exc, ttl_ms)


class InProcessLeases:
    """Leases among the tasks of one process, with the same semantics as RedisLeases."""

    shared = False

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.monotonic
        self._holders: dict[str, tuple[str, int, float]] = {}  # name -> owner, token, expiry
        self._tokens: dict[str, int] = {}

    def _current(self, name: str) -> tuple[str, int, float] | None:
        holder = self._holders.get(name)
        if holder is not None and holder[2] <= self._clock():
            del self._holders[name]
            return None
        return holder

    async def acquire(self, name: str, owner: str, ttl_ms: int) -> Lease | None:
        if self._current(name) is not None:
            return None
        token = self._tokens.get(name, 0) + 1
        self._tokens[name] = token
        self._holders[name] = (owner, token, self._clock() + ttl_ms / 1000)
        return Lease(name, owner, token, ttl_ms)

    async def renew(self, lease: Lease) -> bool:
        holder = self._current(lease.name)
        if holder is None or holder[:2] != (lease.owner, lease.fencing_token):
            lease.lost.set()
            return False
        expiry = self._clock() + lease.ttl_ms / 1000
        self._holders[lease.name] = (lease.owner, lease.fencing_token, expiry)
        return True

    async def release(self, lease: Lease) -> None:
        holder = self._current(lease.name)
        if holder is not None and holder[:2] == (lease.owner, lease.fencing_token):
            del self._holders[lease.name]

    async def holder(self, name: str) -> str | None:
        current = self._current(name)
        return None if current is None else current[0]

    async def holders(self, prefix: str) -> dict[str, str]:
        names = [name for name in self._holders if name.startswith(prefix)]
        return {name: current[0] for name in names if (current := self._current(name))}

    async def close(self) -> None:
        self._holders.clear()
