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
# A URL is given up this long before it expires: a read started on it must
# have time to get its answer, and the store's clock may run ahead of ours.
EXPIRY_MARGIN_S = 30.0
# Of a URL that lasts less than twice the margin, the first half is used.
MIN_USE_FRACTION = 0.5


class SignedUrlCache(Generic[K]):
    """The URLs of segments read recently, each until shortly before it expires."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._urls: OrderedDict[K, tuple[str, float]] = OrderedDict()  # url, use until

    def get(self, key: K) -> str | None:
        found = self.lasting(key)
        return None if found is None else found[0]

    def lasting(self, key: K) -> tuple[str, float] | None:
        """(URL, seconds it may still be used) of `key`, if kept and not expiring."""
        entry = self._urls.get(key)
        if entry is None:
            return None
        url, use_until = entry
        left = use_until - time.monotonic()
        if left <= 0:
            del self._urls[key]
            return None
        self._urls.move_to_end(key)
        return url, left

    def keep(self, key: K, url: str, valid_for_s: float) -> None:
        usable_s = max(valid_for_s - EXPIRY_MARGIN_S, valid_for_s * MIN_USE_FRACTION)
        self._urls[key] = (url, time.monotonic() + usable_s)
        self._urls.move_to_end(key)
        while len(self._urls) > self.max_entries:
            self._urls.popitem(last=False)

    def forget(self, key: K) -> None:
        self._urls.pop(key, None)
