"""LocateOffsetRange: where an offset range's bytes lie, for a reader that reads them itself.

A bulk reader (a Spark task, a TieredConsumer) asks for the segments of a range
and gets, per segment, a presigned URL of its log and the byte range to read: from
the offset index's entry at or before the range's first offset, to a batch
boundary past its last. It then reads S3 directly, in parallel ranged GETs; this
service only looks up metadata and indexes, and the segment store only signs.
Readers on many hosts then read at the bucket's rate, not this service's.

URLs come from the store (GetLogSegmentUrl) and are kept per segment until
shortly before they expire, as a reader of many ranges asks again and again.

A segment stored as chunks (compressed, encrypted) is located for a reader that
decodes them: its range comes with the chunk index and, over TLS only, the data key.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from remotelog.core.errors import (
    SCOPE_KEY,
    SEGMENT_SCOPE,
    InvalidArgumentError,
    UnsupportedOperationError,
)
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentByteRange,
    SignedLog,
    StoredChunks,
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
    def __init__(
        self,
        reader: RemoteLogReader,
        store: SegmentReader,
        *,
        enabled: bool,
        data_keys_over_tls: bool = False,
    ) -> None:
        self.reader = reader
        self.store = store
        self.enabled = enabled
        self.data_keys_over_tls = data_keys_over_tls
        self._urls: SignedUrlCache[RemoteLogSegmentId, SignedLog] = SignedUrlCache()

    async def locate(
        self,
        partition: TopicIdPartition,
        start_offset: int,
        end_offset: int | None,
        max_segments: int,
        deadline: Deadline,
        chunks_accepted: bool = False,
    ) -> list[SegmentByteRange]:
        """The segments holding [start_offset, end_offset) from its start, at most
        `max_segments` (0: the default), in offset order; segments stored as chunks only
        for a caller that decodes them (`chunks_accepted`)."""
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
                *(
                    self._byte_range(s, start_offset, end_offset, deadline, chunks_accepted)
                    for s in segments
                )
            )
        )

    async def _byte_range(
        self,
        segment: RemoteLogSegmentMetadata,
        start_offset: int,
        end_offset: int | None,
        deadline: Deadline,
        chunks_accepted: bool,
    ) -> SegmentByteRange:
        size = segment.segment_size_in_bytes
        entry = await self.reader.index_cache.entry(segment, timeout_s=deadline.remaining())
        start = entry.lookup_offset(max(start_offset, segment.start_offset)).position
        end = size
        if end_offset is not None and end_offset <= segment.end_offset:
            end = entry.position_after(end_offset - 1, size)
        signed = await self._url(segment, deadline)
        chunks = signed.chunks
        if chunks is not None:
            self._check_handed_out(segment, chunks, chunks_accepted)
        return SegmentByteRange(segment, signed.url, signed.valid_for_s, start, end, chunks)

    def _check_handed_out(
        self, segment: RemoteLogSegmentMetadata, chunks: StoredChunks, chunks_accepted: bool
    ) -> None:
        """UnsupportedOperationError (of this segment only) where the caller cannot decode
        the chunks, or would get their data key over a channel without TLS."""
        what = f"segment {segment.remote_log_segment_id.id}"
        if not chunks_accepted:
            raise UnsupportedOperationError(
                f"{what} is stored compressed or encrypted, and this caller does not decode "
                "chunks (chunks_accepted); use ReadOffsetRange",
                metadata={SCOPE_KEY: SEGMENT_SCOPE},
            )
        if chunks.data_key is not None and not self.data_keys_over_tls:
            raise UnsupportedOperationError(
                f"{what} is encrypted, and this fetch service hands its data key to no caller "
                "over a channel without TLS (tls.cert.file is unset); use ReadOffsetRange",
                metadata={SCOPE_KEY: SEGMENT_SCOPE},
            )

    async def _url(self, segment: RemoteLogSegmentMetadata, deadline: Deadline) -> SignedLog:
        """The segment's URL, kept or signed now, with its chunks where it has them."""
        key = segment.remote_log_segment_id
        kept = self._urls.lasting(key)
        if kept is not None:
            signed, left_s = kept
            return replace(signed, valid_for_s=left_s)
        signed = await self.store.get_log_segment_url(
            segment, chunks_accepted=True, timeout_s=deadline.remaining()
        )
        self._urls.keep(key, signed, signed.valid_for_s)
        return signed
