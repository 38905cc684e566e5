"""ListOffsets by timestamp over the remote tier (RemoteLogManager.findOffsetByTimestamp).

Segments are visited in offset order; the first whose max timestamp reaches
the target is searched: its time index gives a starting offset, the offset
index a position, and the batches from there are decoded until a record with
a timestamp >= the target. The answer carries that record's timestamp and
the leader epoch of its batch, as Kafka's does.
"""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.fetch.reader import Deadline, RemoteLogReader
from remotelog.fetch.remote_tier import RemoteTierView
from remotelog.kafka.batches import BatchCutter
from remotelog.kafka.records import decode_records, iter_batches

_SCAN_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    offset: int
    timestamp: int | None
    leader_epoch: int | None


def _first_at_or_after(data: bytes, timestamp: int, source: str) -> OffsetAndEpoch | None:
    for header in iter_batches(data, source=source, verify_crc=False):
        if header.max_timestamp < timestamp:
            continue
        for record in decode_records(data, header, source=source):
            record_timestamp = (
                header.max_timestamp if header.is_log_append_time else record.timestamp
            )
            if record_timestamp >= timestamp:
                epoch = header.partition_leader_epoch
                return OffsetAndEpoch(
                    record.offset, record_timestamp, epoch if epoch >= 0 else None
                )
    return None


async def offset_for_timestamp(
    reader: RemoteLogReader, view: RemoteTierView, timestamp: int, deadline: Deadline
) -> OffsetAndEpoch | None:
    for segment in view.segments:
        if segment.max_timestamp_ms < timestamp:
            continue
        entry = await reader.index_cache.entry(segment, timeout_s=deadline.remaining())
        start = entry.lookup_timestamp(timestamp).offset
        position = entry.lookup_offset(start).position
        source = f"remote segment {segment.remote_log_segment_id}"
        cutter = BatchCutter(start, source)
        stream = reader.segment_bytes(segment, position, deadline, _SCAN_BYTES)
        try:
            async for chunk in stream:
                cutter.feed(chunk)
                taken = cutter.take(cutter.buffered)
                if taken is not None:
                    found = _first_at_or_after(bytes(taken.data), timestamp, source)
                    if found is not None:
                        return found
        finally:
            await stream.aclose()
    return None
