"""LocateOffsetRange: where an offset range's bytes lie, for a reader that reads them itself.

A bulk reader (a Spark task, a TieredConsumer) asks for the segments of a range
and gets, per segment, a presigned URL of its log and the byte range to read: from
the offset index's entry at or before the range's first offset, to a batch
boundary past its last. It then reads S3 directly, in parallel ranged GETs; this
service only looks up metadata and indexes, and the segment store only signs.
Readers on many hosts then read at the bucket's rate, not this service's.

URLs come from the store (GetLogSegmentUrl) and are kept per segment until
shortly before they expire, as a reader of many ranges asks again and again.
"""

from __future__ import annotations

import asyncio

from remotelog.core.errors import InvalidArgumentError, UnsupportedOperationError
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentByteRange,
    TopicIdPartition,
)
from remotelog.core.ports import SegmentReader
from remotelog.fetch.reader import Deadline, RemoteLogReader
from remotelog.fileio.url_cache import SignedUrlCache

# Segments one answer names when the caller does not say: a task of 128 MiB of
# 1 GiB segments needs one, of 1 MiB segments (tests, small topics) 128.
DEFAULT_LOCATED_SEGMENTS = 16
# Each located segment may cost index GETs and URL signatures, and its URLs are a few
# KiB of the answer: one request may not fan out past this many.
MAX_LOCATED_SEGMENTS = 64


class SegmentLocator:
    def __init__(self, reader: RemoteLogReader, store: SegmentReader, *, enabled: bool) -> None:
        self.reader = reader
        self.store = store
        self.enabled = enabled
        self._urls: SignedUrlCache[RemoteLogSegmentId] = SignedUrlCache()

    async def locate(
        self,
        partition: TopicIdPartition,
        start_offset: int,
        end_offset: int | None,
        max_segments: int,
        deadline: Deadline,
    ) -> list[SegmentByteRange]:
        """The segments holding [start_offset, end_offset) from its start, at most
        `max_segments` (0: the default), in offset order."""
        if not self.enabled:
            raise UnsupportedOperationError(
                "this fetch service hands out no URLs (segment.store.fetch.urls.enabled "
                "is false); use ReadOffsetRange"
            )
        if not 0 <= max_segments <= MAX_LOCATED_SEGMENTS:
            raise InvalidArgumentError(
                "max_segments", f"must be from 0 to {MAX_LOCATED_SEGMENTS}, got {max_segments}"
            )
        if end_offset is not None and end_offset <= start_offset:
            return []
        view, first = await self.reader.locate(partition, start_offset, deadline)
        segment: RemoteLogSegmentMetadata | None = first
        segments: list[RemoteLogSegmentMetadata] = []
        while segment is not None and len(segments) < (max_segments or DEFAULT_LOCATED_SEGMENTS):
            if end_offset is not None and segment.start_offset >= end_offset:
                break
            segments.append(segment)
            segment = view.next_after(segment)
        # Together: each may fetch its indexes and a URL from the store, and the reader
        # waits for all of them before its first GET.
        return list(
            await asyncio.gather(
                *(self._byte_range(s, start_offset, end_offset, deadline) for s in segments)
            )
        )

    async def _byte_range(
        self,
        segment: RemoteLogSegmentMetadata,
        start_offset: int,
        end_offset: int | None,
        deadline: Deadline,
    ) -> SegmentByteRange:
        size = segment.segment_size_in_bytes
        entry = await self.reader.index_cache.entry(segment, timeout_s=deadline.remaining())
        start = entry.lookup_offset(max(start_offset, segment.start_offset)).position
        end = size
        if end_offset is not None and end_offset <= segment.end_offset:
            end = entry.position_after(end_offset - 1, size)
        url, valid_for_s = await self._url(segment, deadline)
        return SegmentByteRange(segment, url, valid_for_s, start, end)

    async def _url(
        self, segment: RemoteLogSegmentMetadata, deadline: Deadline
    ) -> tuple[str, float]:
        key = segment.remote_log_segment_id
        kept = self._urls.lasting(key)
        if kept is not None:
            return kept
        url, valid_for_s = await self.store.get_log_segment_url(
            segment, timeout_s=deadline.remaining()
        )
        self._urls.keep(key, url, valid_for_s)
        return url, valid_for_s
