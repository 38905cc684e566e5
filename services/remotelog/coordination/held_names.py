"""Who holds the leases under a prefix, as last read from the lease store.

For a hot path that must never wait on the lease store: the metadata manager
asks it on every IsReady and every write whether a partition is being
recovered. A background task reads the store every `interval_s`; a store that
hangs or is down delays only that task. Grants of this process are known at
once; another process's within an interval, which is why a holder that guards
others' writes waits `notice_s` after its grant before relying on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from remotelog.coordination.lease import Leases
from remotelog.core.errors import RemoteLogError

log = logging.getLogger(__name__)


class HeldNames:
    def __init__(
        self, leases: Leases, prefix: str, *, interval_s: float, forget_after_s: float
    ) -> None:
        self._leases = leases
        self._prefix = prefix
        self.interval_s = interval_s
        # A view this old (the store unanswered since) says nobody holds anything: no
        # lease outlives its ttl unrenewed, and `forget_after_s` is at least that.
        self._forget_after_s = forget_after_s
        self._read: dict[str, str] = {}
        self._read_at = time.monotonic()
        self._own: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def notice_s(self) -> float:
        """How long after a grant every process's view shows it."""
        return 2 * self.interval_s if self._leases.shared else 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._refresh_loop())

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            # Told to stop, not cancelled (see lease.held): the read in flight is bounded
            # by the store's own timeout.
            await self._task

    def holder(self, name: str) -> str | None:
        if name in self._own:
            return self._own[name]
        if time.monotonic() - self._read_at > self._forget_after_s:
            return None
        return self._read.get(name)

    def hold(self, name: str, owner: str) -> None:
        """This process was granted `name`."""
        self._own[name] = owner

    def release(self, name: str) -> None:
        self._own.pop(name, None)

    async def _refresh_loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self._read = await self._leases.holders(self._prefix)
                self._read_at = time.monotonic()
                if failing:
                    log.info(
                        "lease store answering again: %d %s* held", len(self._read), self._prefix
                    )
                failing = False
            except RemoteLogError as exc:
                if not failing:
                    log.warning(
                        "could not read the %s* leases (%s): answering from what was read "
                        "%.1f s ago, and as if none were held after %.0f s",
                        self._prefix,
                        exc,
                        time.monotonic() - self._read_at,
                        self._forget_after_s,
                    )
                failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
