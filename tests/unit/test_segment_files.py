"""Whole segments read from the stored files (remotelog.client.segment_files): which
segments qualify, and the files cut into chunks of whole batches."""

import os
import uuid

import pytest
from support.tiering import batch

from remotelog.client.segment_files import batch_chunks, whole_segments
from remotelog.core.errors import RemoteStorageError
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from remotelog.kafka.records import iter_batches

TIP = TopicIdPartition(uuid.uuid4(), "files", 0)
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def segment(start: int, end: int, state=FINISHED) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, uuid.uuid4()),
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=0,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=1,
        segment_leader_epochs={0: start},
        state=state,
    )


def test_whole_segments_run_from_the_start_while_each_alone_holds_its_offsets():
    a, b, c = segment(0, 9), segment(10, 19), segment(20, 29)
    assert whole_segments([c, a, b], 0, 30) == [a, b, c]
    assert whole_segments([a, b, c], 0, 15) == [a, b]  # the read ends inside b
    assert whole_segments([a, b, c], 5, 30) == []  # starts inside a: the service finds 5
    assert whole_segments([a, b, c], 10, 30) == [b, c]
    # Compaction left a gap: a segment's metadata ends past its last record.
    assert whole_segments([segment(0, 19), segment(20, 29)], 0, 30)[-1].start_offset == 20


def test_overlapping_or_unfinished_segments_are_left_to_the_fetch_service():
    a, b = segment(0, 9), segment(10, 19)
    other_epoch = segment(15, 25)  # an unclean election: two histories of 15-19
    assert whole_segments([a, b, other_epoch], 0, 30) == [a]
    assert whole_segments([a, b, other_epoch], 0, 12) == [a, b]  # 10-11: b alone
    copying = segment(10, 19, RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    assert whole_segments([a, copying], 0, 20) == [a]
    deleting = segment(0, 9, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    assert whole_segments([deleting, b], 0, 20) == []


def opened(path, data: bytes) -> tuple[int, int]:
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY), len(data)


async def chunks_of(fd_size, end_offset, chunk_bytes, block_bytes) -> list[bytes]:
    return [
        bytes(chunk)
        async for chunk in batch_chunks(*fd_size, end_offset, chunk_bytes, block_bytes=block_bytes)
    ]


@pytest.mark.parametrize("block_bytes", [100, 4096, 1 << 20])
async def test_a_file_is_cut_into_whole_batches_across_its_mapped_blocks(tmp_path, block_bytes):
    batches = [batch(n * 5, 5, size=30 + n) for n in range(40)]
    data = b"".join(batches)
    chunks = await chunks_of(opened(tmp_path / "a.log", data), 1 << 62, 600, block_bytes)
    assert b"".join(chunks) == data
    for chunk in chunks:  # each parses as whole batches
        assert sum(h.size for h in iter_batches(chunk)) == len(chunk)
    if block_bytes > len(data):  # one block: chunks cut only by size
        assert all(len(chunk) >= 600 for chunk in chunks[:-1])
        assert len(chunks) > 3


async def test_the_read_stops_before_the_first_batch_at_or_past_the_end(tmp_path):
    data = b"".join(batch(n * 5, 5) for n in range(10))
    chunks = await chunks_of(opened(tmp_path / "a.log", data), 22, 1 << 20, 1 << 20)
    offsets = [h.base_offset for chunk in chunks for h in iter_batches(chunk)]
    assert offsets == [0, 5, 10, 15, 20]  # 20-24 holds 21; 25 on is left


async def test_a_file_that_ends_inside_a_batch_is_an_error_and_its_descriptor_is_closed(tmp_path):
    data = b"".join(batch(n, 1) for n in range(3))
    fd, size = opened(tmp_path / "a.log", data[:-7])
    with pytest.raises(RemoteStorageError, match="ends inside the batch"):
        await chunks_of((fd, size), 1 << 62, 1 << 20, 1 << 20)
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
