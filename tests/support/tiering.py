"""Tiering a partition directory straight through the store and metadata clients.

What the copy scheduler does for rolled segments, done here for every segment
of a directory (the active one too), so the read path can be tested against
exactly the bytes of a broker-written log.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from remotelog.client import LogSegmentData
from remotelog.core.epochs import entries_in_range
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState
from remotelog.kafka.records import Record, build_batch, iter_batches
from remotelog.scheduler.local_log import LocalLog


def batch(base_offset: int, count: int = 1, *, size: int = 10, timestamp: int = 1_000) -> bytes:
    """One record batch of `count` records from `base_offset`."""
    records = [
        Record(
            base_offset + i,
            timestamp + base_offset + i,
            f"k{base_offset + i}".encode(),
            b"v" * size,
        )
        for i in range(count)
    ]
    return build_batch(records)


@dataclass(frozen=True)
class TieredSegment:
    metadata: RemoteLogSegmentMetadata
    log: bytes


def _file(directory: Path, base: int, suffix: str) -> Path | bytes:
    path = directory / f"{base:020d}{suffix}"
    return path if path.exists() else b""


async def tier_segment(
    store,
    metadata_client,
    tip: TopicIdPartition,
    log: bytes,
    files: dict[str, Path | bytes],
    *,
    start_offset: int,
    end_offset: int | None = None,
    epochs: tuple[tuple[int, int], ...] | None = None,
    txn_index: Path | bytes | None = None,
) -> TieredSegment:
    """Copy one segment (log bytes + index files) and record it COPY_SEGMENT_FINISHED."""
    headers = list(iter_batches(log))
    last = headers[-1].last_offset if headers else start_offset
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        start_offset,
        end_offset if end_offset is not None else last,
        max((h.max_timestamp for h in headers), default=-1),
        0,
        0,
        len(log),
        epochs or ((0, start_offset),),
        txn_index_empty=not txn_index,
    )
    await store.copy_log_segment_data(
        metadata,
        LogSegmentData(
            log,
            files.get(".index", b""),
            files.get(".timeindex", b""),
            files.get(".snapshot", b""),
            b"0\n0\n",
            txn_index or None,
        ),
    )
    await metadata_client.add_remote_log_segment_metadata(metadata)
    update = RemoteLogSegmentMetadataUpdate(
        metadata.remote_log_segment_id, 0, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0
    )
    await metadata_client.update_remote_log_segment_metadata(update)
    finished = metadata.create_with_updates(update)
    return TieredSegment(finished, log)


async def tier_directory(store, metadata_client, tip, directory: Path) -> list[TieredSegment]:
    """Every segment of a broker-written partition directory, in offset order."""
    local = LocalLog.scan(directory)
    lineage = local.leader_epochs
    tiered = []
    for segment in local.segments:
        log = segment.path(".log").read_bytes()
        headers = list(iter_batches(log))
        if not headers:
            continue  # an empty active segment: nothing to tier
        end = headers[-1].last_offset
        epochs = tuple(entries_in_range(lineage, segment.base_offset, end + 1)) if lineage else None
        txn = segment.path(".txnindex")
        files = {s: _file(directory, segment.base_offset, s) for s in (".index", ".timeindex")}
        files[".snapshot"] = _file(directory, segment.base_offset, ".snapshot")
        tiered.append(
            await tier_segment(
                store,
                metadata_client,
                tip,
                log,
                files,
                start_offset=segment.base_offset,
                end_offset=(segment.next_offset - 1) if segment.next_offset is not None else end,
                epochs=epochs,
                txn_index=txn.read_bytes() if txn.exists() and txn.stat().st_size else None,
            )
        )
    return tiered
