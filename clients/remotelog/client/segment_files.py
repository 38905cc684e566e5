"""A partition's history read from the stored segment files themselves, lent by a
segment store on this host over its short circuit (`short.circuit.socket.path`).

The remote fetch service's bulk read reads a segment's file, copies it into
messages and streams them; the reader receives and copies them once more. A
reader on the store's host maps the file instead and decodes the page cache in
place: no service between, no copy. Only whole segments are read this way, and
only where one segment alone holds their offsets: where segments of different
leader epochs overlap, or a read starts inside a segment, the fetch service
picks the records (it follows the epochs, and finds a position by the offset
index). A store that cannot be reached this way (another host, an older store,
an S3 backend) is not an error: the fetch service reads the rest.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.client.log_readers import ShortCircuitLogReader
from remotelog.client.short_circuit import MAPPED_BLOCK_BYTES, ShortCircuit
from remotelog.core.errors import RemoteResourceNotFoundError, RemoteStorageError
from remotelog.core.model import RemoteLogSegmentMetadata, RemoteLogSegmentState
from remotelog.fileio.pagecache import map_chunks
from remotelog.protocol.convert import segment_metadata_to_proto

# A batch's size is its length field (bytes 8..11) plus the 12 bytes before it.
_LENGTH_AT, _LOG_OVERHEAD = 8, 12


def whole_segments(
    segments: Sequence[RemoteLogSegmentMetadata], start: int, end: int
) -> list[RemoteLogSegmentMetadata]:
    """The segments that hold [start, end) from `start` on, each from its first offset,
    while each is the only finished segment with any of the offsets read from it."""
    finished = [s for s in segments if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    chosen: list[RemoteLogSegmentMetadata] = []
    position = start
    while position < end:
        segment = next((s for s in finished if s.start_offset == position), None)
        if segment is None:
            break
        last = min(segment.end_offset, end - 1)
        if any(
            o is not segment and o.start_offset <= last and o.end_offset >= position
            for o in finished
        ):
            break
        chosen.append(segment)
        position = segment.end_offset + 1
    return chosen


class SegmentFiles:
    """Stored segment files read through the store's short circuit."""

    def __init__(
        self,
        socket_path: str,
        call_retrying: Callable[..., Awaitable[tuple[int, int]]],
        *,
        timeout_s: float,
    ) -> None:
        self._reader = ShortCircuitLogReader(ShortCircuit(socket_path), call_retrying)
        self.timeout_s = timeout_s
        # Off after the first segment the store did not lend: the rest go by the service.
        self.enabled = True

    async def open(self, segment: RemoteLogSegmentMetadata) -> tuple[int, int] | None:
        """(a descriptor of the segment's log file, the caller's to close; its size), or
        None where the store does not lend it."""
        if not self.enabled:
            return None
        request = pb.FetchLogSegmentRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(segment), start_position=0
        )
        try:
            opened = await self._reader.open(segment, request, self.timeout_s)
        except RemoteResourceNotFoundError:
            # Deleted since it was listed (retention): the fetch service says what is left,
            # as it would have (OffsetOutOfRange, which failOnDataLoss=false skips).
            return None
        self.enabled = opened is not None
        return opened

    async def close(self) -> None:
        await self._reader.close()


async def batch_chunks(
    fd: int,
    size: int,
    end_offset: int,
    chunk_bytes: int,
    *,
    block_bytes: int = MAPPED_BLOCK_BYTES,
) -> AsyncGenerator[memoryview, None]:
    """The log file's whole batches, about `chunk_bytes` at a time, as views of its
    mapping, up to the first batch at or past `end_offset`; closes `fd` when done.

    The file is mapped a block at a time (populated on a thread, as a disk wait may
    come); a batch that crosses a block's end starts the next block.
    """
    try:
        position = 0
        while position < size:
            through = min(size, position + max(block_bytes, chunk_bytes))
            block = await _mapped(fd, position, through)
            stops, ended = _whole_batches(block, end_offset)
            if not stops and not ended:  # one batch longer than the block
                needed = _batch_size(block, 0) if len(block) >= _LOG_OVERHEAD else 0
                if through == size or position + needed > size:
                    raise RemoteStorageError(
                        f"the stored log ends inside the batch at byte {position}"
                    )
                block = await _mapped(fd, position, position + needed)
                stops = [needed]
            chunk_start = 0
            for index, stop in enumerate(stops):
                if stop - chunk_start >= chunk_bytes or index == len(stops) - 1:
                    yield block[chunk_start:stop]
                    chunk_start = stop
            if ended:
                return
            position += stops[-1]
    finally:
        os.close(fd)


async def _mapped(fd: int, start: int, stop: int) -> memoryview:
    (block,) = await asyncio.to_thread(map_chunks, fd, start, stop, stop - start)
    return block


def _batch_size(block: memoryview, at: int) -> int:
    length = int.from_bytes(block[at + _LENGTH_AT : at + _LENGTH_AT + 4], "big", signed=True)
    return max(length, 0) + _LOG_OVERHEAD


def _whole_batches(block: memoryview, end_offset: int) -> tuple[list[int], bool]:
    """Where each whole batch from the block's start ends, and whether a batch at or
    past `end_offset` came (the read is done)."""
    stops: list[int] = []
    at = 0
    while at + _LOG_OVERHEAD <= len(block):
        if int.from_bytes(block[at : at + 8], "big", signed=True) >= end_offset:
            return stops, True
        size = _batch_size(block, at)
        if at + size > len(block):
            break
        at += size
        stops.append(at)
    return stops, False
