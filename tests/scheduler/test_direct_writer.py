"""DirectSegmentWriter: the scheduler's segment-store port over an in-process store."""

import os

import pytest
from segmentstore.segments import segment_metadata
from support.services import new_bucket, store_config

from remotelog.client import LogSegmentData
from remotelog.core.errors import DeadlineExceededError
from remotelog.core.model import SegmentFile
from remotelog.scheduler.direct import DirectSegmentWriter
from remotelog.segmentstore.factory import open_segment_store


async def writer(tmp_path, backend, s3_endpoint, read_bytes):
    bucket = new_bucket(s3_endpoint) if backend == "s3" else ""
    config = store_config(backend, tmp_path, s3_endpoint, bucket)
    store = await open_segment_store(config, config.backoff())
    return DirectSegmentWriter(store, read_bytes)


async def read(chunks) -> bytes:
    return b"".join([bytes(chunk) async for chunk in chunks])


async def test_files_are_read_in_pieces_and_stored_whole(tmp_path, s3_endpoint):
    log, index = os.urandom(2500), os.urandom(1000)
    (tmp_path / "0.log").write_bytes(log)
    (tmp_path / "0.index").write_bytes(index)
    (tmp_path / "0.timeindex").write_bytes(b"")
    files = LogSegmentData(
        log_segment=tmp_path / "0.log",  # three pieces, the last short
        offset_index=tmp_path / "0.index",  # exactly one piece
        time_index=tmp_path / "0.timeindex",  # empty
        producer_snapshot_index=b"snap",
        leader_epoch_index=b"0\n1\n0 0\n",
    )
    direct = await writer(tmp_path, "filesystem", s3_endpoint, read_bytes=1000)
    metadata = segment_metadata(size=len(log))
    custom = await direct.copy_log_segment_data(metadata, files, timeout_s=10)
    assert b'"remote_size":' in (custom or b"")
    store = direct.store
    assert await read(store.fetch_log_segment(metadata, 0, None)) == log
    assert await read(store.fetch_index(metadata, SegmentFile.OFFSET_INDEX)) == index
    assert await read(store.fetch_index(metadata, SegmentFile.TIME_INDEX)) == b""

    await direct.delete_log_segment_data(metadata, timeout_s=10)
    assert [p for p in (tmp_path / "segments").rglob("*") if p.is_file()] == []
    await direct.close()


async def test_a_copy_past_its_deadline_fails_retriably_and_a_retry_succeeds(
    tmp_path, s3_endpoint, s3_faults
):
    direct = await writer(tmp_path, "s3", s3_endpoint, read_bytes=1 << 20)
    data = os.urandom(5000)
    metadata = segment_metadata(size=len(data))
    files = LogSegmentData(data, b"", b"", b"", b"")
    s3_faults("slow", count=1_000, method="PUT", delay_ms=2_000)
    try:
        with pytest.raises(DeadlineExceededError, match=r"took over 0\.5 s") as caught:
            await direct.copy_log_segment_data(metadata, files, timeout_s=0.5)
        assert caught.value.retriable
    finally:
        s3_faults(None)
    await direct.copy_log_segment_data(metadata, files, timeout_s=10)
    assert await read(direct.store.fetch_log_segment(metadata, 0, None)) == data
    await direct.close()
