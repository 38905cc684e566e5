"""Real broker segments as copy requests: their metadata and files."""

import uuid
from pathlib import Path

from support.services import new_partition

from remotelog.client import LogSegmentData
from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata
from remotelog.kafka.records import iter_batches


def segment_metadata(
    log: Path | None = None,
    *,
    topic: str = "orders",
    partition: int = 0,
    size: int | None = None,
    start_offset: int | None = None,
) -> RemoteLogSegmentMetadata:
    if log is not None:
        data = log.read_bytes()
        headers = list(iter_batches(data))
        start = headers[0].base_offset
        end = headers[-1].last_offset
        size = len(data)
    else:
        start = start_offset or 0
        end = start + 99
    tip = new_partition(topic, partition)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tip, uuid.uuid4()),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_001,
        segment_size_in_bytes=size or 0,
        segment_leader_epochs=((0, start),),
    )


def segment_files(log: Path) -> LogSegmentData:
    snapshot = log.with_suffix(".snapshot")
    checkpoint = log.parent / "leader-epoch-checkpoint"
    return LogSegmentData(
        log_segment=log,
        offset_index=log.with_suffix(".index"),
        time_index=log.with_suffix(".timeindex"),
        producer_snapshot_index=snapshot if snapshot.exists() else b"",
        leader_epoch_index=checkpoint.read_bytes(),
    )


def synthetic_files(log: bytes, txn: bytes | None = None) -> LogSegmentData:
    return LogSegmentData(
        log_segment=log,
        offset_index=b"\x00" * 16,
        time_index=b"\x01" * 24,
        producer_snapshot_index=b"snap",
        leader_epoch_index=b"0\n1\n0 0\n",
        transaction_index=txn,
    )
