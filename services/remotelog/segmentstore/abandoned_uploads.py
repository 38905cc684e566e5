"""Aborts the uploads no copy will finish.

A copy cut off by a killed store or broker leaves its upload behind: a temp file, an
S3 multipart upload. The only other thing that removes it is Kafka's delete of the
failed attempt, and Kafka retries a delete that failed (the store down) only when
retention reaches that segment: never, with retention.ms=-1. An upload older than the
longest a copy may take is dead whichever store instance began it, so every instance
sweeps, and a sweep that races another only aborts twice (aborts are idempotent).

An upload's age is the lesser of what the backend says and how long this sweeper has
seen it: a clock of the object store's that runs ahead (or an S3 look-alike that dates
every upload to 2010, as moto does) must not abort a copy in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from remotelog.core import metrics as m
from remotelog.core.errors import RemoteLogError
from remotelog.segmentstore.backend import ObjectStore
from remotelog.segmentstore.layout import parse_segment_key

log = logging.getLogger(__name__)
SCOPE = "remotelog.segmentstore"
# How often a store looks: a quarter of the age that makes an upload dead, so one
# lingers at most a quarter past it, and never less often than every ten minutes.
_SWEEPS_PER_AGE = 4
_MAX_INTERVAL_S = 600.0
_MIN_INTERVAL_S = 1.0


class AbandonedUploads:
    def __init__(
        self,
        objects: ObjectStore,
        key_prefix: str,
        *,
        after_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._objects = objects
        self._prefix = key_prefix
        self.after_s = after_s
        self.interval_s = min(max(after_s / _SWEEPS_PER_AGE, _MIN_INTERVAL_S), _MAX_INTERVAL_S)
        self._clock = clock
        # When this sweeper first listed each upload still there: (key, upload id) -> time.
        self._seen: dict[tuple[str, str], float] = {}
        self._metrics = m.Instruments(SCOPE, m.STORE)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def sweep(self) -> int:
        """Abort every upload of a segment older than `after_s`; how many there were.

        Only keys the segment layout writes: a bucket shared with others holds
        uploads that are not the store's to abort."""
        now = self._clock()
        aborted = 0
        seen: dict[tuple[str, str], float] = {}
        async for upload in self._objects.incomplete_uploads(self._prefix):
            if parse_segment_key(self._prefix, upload.key) is None:
                continue
            name = (upload.key, upload.upload_id)
            first_seen = seen[name] = self._seen.get(name, now)
            age = now - max(upload.initiated_s, first_seen)
            if age < self.after_s:
                continue
            await self._objects.abort_upload(upload)
            del seen[name]
            aborted += 1
            log.info(
                "aborted the upload of %s, %.0f s old: no copy takes that long "
                "(incomplete.uploads.abort.after.ms)",
                upload.key,
                age,
            )
        self._seen = seen
        if aborted:
            self._metrics.add(m.STORE_UPLOADS_ABORTED, aborted)
        return aborted

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.sweep()
            except RemoteLogError as exc:
                # The next sweep asks again; nothing waits on this one.
                log.warning("could not sweep abandoned uploads: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
