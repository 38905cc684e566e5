"""Signed URLs kept until shortly before they expire, so a read asks for no new one.

The segment store signs a URL per segment log (GetLogSegmentUrl); its callers (the
fetch service, its bulk readers, the Kafka plugin's reads) keep it for the next
reads of that segment.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
# A URL is given up this long before it expires: a read started on it must
# have time to get its answer, and the store's clock may run ahead of ours.
EXPIRY_MARGIN_S = 30.0
# Of a URL that lasts less than twice the margin, the first half is used.
MIN_USE_FRACTION = 0.5


class SignedUrlCache(Generic[K, V]):
    """The URLs of segments read recently, each until shortly before it expires: each
    kept as a `V`, the URL with whatever a read needs beside it (how the segment's log
    is stored), so the two are never apart."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._urls: OrderedDict[K, tuple[V, float]] = OrderedDict()  # signed, use until

    def get(self, key: K) -> V | None:
        found = self.lasting(key)
        return None if found is None else found[0]

    def lasting(self, key: K) -> tuple[V, float] | None:
        """What `key`'s URL was kept as, and the seconds it may still be used, if kept
        and not expiring."""
        entry = self._urls.get(key)
        if entry is None:
            return None
        signed, use_until = entry
        left = use_until - time.monotonic()
        if left <= 0:
            del self._urls[key]
            return None
        self._urls.move_to_end(key)
        return signed, left

    def keep(self, key: K, signed: V, valid_for_s: float) -> None:
        usable_s = max(valid_for_s - EXPIRY_MARGIN_S, valid_for_s * MIN_USE_FRACTION)
        self._urls[key] = (signed, time.monotonic() + usable_s)
        self._urls.move_to_end(key)
        while len(self._urls) > self.max_entries:
            self._urls.popitem(last=False)

    def forget(self, key: K) -> None:
        self._urls.pop(key, None)
