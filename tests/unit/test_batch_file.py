"""read_batches: whole batches of a segment file read into their ReadOffsetRangeResponse.

The compiled function and the Python reference give the same answers; every
message parses with protobuf and holds whole batches only, within the byte
budget, from the wanted offset to the end offset.
"""

import asyncio
import itertools
import os
import random
import struct

import pytest
from support.data import KAFKA_LOGS
from support.page_cache import until_evicted

from remotelog.api.fetch.v1 import remote_fetch_pb2 as pb
from remotelog.core.errors import CorruptRecordError, RemoteStorageError
from remotelog.fetch import batch_file
from remotelog.fetch.batch_file import read_batch_message
from remotelog.kafka.records import Record, build_batch

READERS = [pytest.param(batch_file._read_batches_python, id="python")]
if batch_file.COMPILED:
    READERS.append(pytest.param(batch_file.read_batches, id="compiled"))
BROKER_WRITTEN = sorted(KAFKA_LOGS.glob("*/*.log"))
KIB = 1024


def test_the_compiled_reader_is_built():
    assert batch_file.COMPILED  # `make setup` requires the C extensions


def mixed_segment() -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """Batches of 100 B to 300 KiB (both sides of the header-walk threshold), and
    their (position, size, base offset, last offset)."""
    rng = random.Random(3)
    sizes = [100, 900, 5 * KIB, 20 * KIB, 70 * KIB, 300 * KIB, 64 * KIB, 1]
    parts, found, offset, position = [], [], 0, 0
    for _ in range(60):
        count = rng.randint(1, 4)
        value = rng.randbytes(rng.choice(sizes))
        batch = build_batch([Record(offset + i, 1_000 + i, None, value, ()) for i in range(count)])
        found.append((position, len(batch), offset, offset + count - 1))
        parts.append(batch)
        position += len(batch)
        offset += count
    return b"".join(parts), found


SEGMENT, BATCHES = mixed_segment()


@pytest.fixture
def file_of(tmp_path):
    """file_of(data): a read-only descriptor of a new file holding `data`, closed after."""
    fds = []

    def written(data):
        path = tmp_path / f"{len(fds)}.log"
        path.write_bytes(data)
        fds.append(os.open(path, os.O_RDONLY))
        return fds[-1]

    yield written
    for fd in fds:
        os.close(fd)


@pytest.fixture
def segment_fd(file_of):
    return file_of(SEGMENT)


def read_all(read, fd, data, start, max_bytes, from_offset, until=-1):
    """Every message from `start` until none is left, each checked."""
    messages, position = [], start
    while True:
        message, size, position, first, last, reached_end = read(
            fd, position, len(data), max_bytes, from_offset, until, 1, 2, 3, False
        )
        if message is None:
            assert size == 0
            return messages, reached_end
        parsed = pb.ReadOffsetRangeResponse.FromString(message)
        assert (len(parsed.records), parsed.first_offset, parsed.last_offset) == (size, first, last)
        assert data[position - size : position] == parsed.records
        messages.append(parsed)
        if reached_end:
            return messages, True


def expected_batches(from_offset, until):
    return [b for b in BATCHES if b[3] >= from_offset and (until < 0 or b[2] < until)]


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("max_bytes", [1, 1_000, 64 * KIB, 200 * KIB, 2 * 1024 * KIB])
@pytest.mark.parametrize(
    ("from_offset", "until"), [(0, -1), (7, -1), (30, 90), (BATCHES[-1][3], -1), (0, 1)]
)
def test_messages_hold_whole_batches_from_the_offset_to_the_end(
    read, segment_fd, max_bytes, from_offset, until
):
    # Start where an index would point: at or before the batch holding the offset.
    start = max(p for p, _, base, _ in BATCHES if base <= max(from_offset - 5, 0))
    messages, reached_end = read_all(
        read, segment_fd, SEGMENT, start, max_bytes, from_offset, until
    )
    wanted = expected_batches(from_offset, until)
    first_position = wanted[0][0]
    last_position, last_size = wanted[-1][0], wanted[-1][1]
    assert (
        b"".join(m.records for m in messages) == SEGMENT[first_position : last_position + last_size]
    )
    assert messages[0].first_offset == wanted[0][2]
    assert messages[-1].last_offset == wanted[-1][3]
    assert reached_end == (until >= 0)
    ends = {p + s for p, s, _, _ in BATCHES}
    for message in messages:
        batches = [
            b for b in BATCHES if b[2] >= message.first_offset and b[3] <= message.last_offset
        ]
        assert sum(b[1] for b in batches) == len(message.records)  # whole batches only
        assert len(message.records) <= max_bytes or len(batches) == 1
        assert len(message.records) + first_position in ends
        first_position += len(message.records)
    for one, following in itertools.pairwise(messages):
        # As full as the budget allows: the next batch would not have fitted.
        next_batch = next(b for b in BATCHES if b[2] == following.first_offset)
        assert len(one.records) + next_batch[1] > max_bytes


@pytest.mark.parametrize("max_bytes", [1, 50 * KIB, 2 * 1024 * KIB])
@pytest.mark.parametrize("start_batch", [0, 3, 17, 41])
def test_the_compiled_reader_answers_as_the_reference(segment_fd, max_bytes, start_batch):
    start = BATCHES[start_batch][0]
    for until in (-1, BATCHES[start_batch + 9][2]):
        args = (segment_fd, start, len(SEGMENT), max_bytes, 0, until, 1, 2, 3, False)
        assert batch_file.read_batches(*args) == batch_file._read_batches_python(*args)


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("path", BROKER_WRITTEN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_broker_written_segments_read_back_whole(read, path):
    data = path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        messages, _ = read_all(read, fd, data, 0, 4 * KIB, 0)
    finally:
        os.close(fd)
    assert b"".join(m.records for m in messages) == data


def test_the_records_length_is_a_four_byte_varint_that_protobuf_reads(segment_fd):
    message, size, *_ = batch_file.read_batches(
        segment_fd, 0, len(SEGMENT), 1, 0, -1, 1, 2, 3, False
    )
    assert message[0] == 0x0A  # field 1, length-delimited
    assert all(b & 0x80 for b in message[1:4])  # padded with continuation bits
    assert message[4] < 0x80
    assert sum((b & 0x7F) << 7 * i for i, b in enumerate(message[1:5])) == size
    assert message[5 : 5 + size] == SEGMENT[:size]
    assert message[5 + size :] == b"\x18" + bytes([BATCHES[0][3]])  # first_offset 0 omitted


@pytest.mark.parametrize("read", READERS)
def test_a_batch_cut_off_by_the_limit_ends_the_read(read, segment_fd):
    position, size, _, _ = BATCHES[5]
    limit = position + size // 2
    messages, _ = read_all(read, segment_fd, SEGMENT[:limit], 0, 10 * 1024 * KIB, 0)
    assert b"".join(m.records for m in messages) == SEGMENT[:position]


@pytest.mark.parametrize("read", READERS)
def test_a_file_shorter_than_the_segment_is_an_error(read, file_of):
    fd = file_of(SEGMENT[: BATCHES[4][0] + 30])
    with pytest.raises(EOFError, match=f"ended at byte {BATCHES[4][0] + 30}"):
        read_all(read, fd, SEGMENT, 0, 10 * 1024 * KIB, 0)


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("big", [False, True], ids=["walked-in-place", "header-by-header"])
@pytest.mark.parametrize(
    ("at", "value", "message"),
    [(16, b"\x01", "unsupported magic 1"), (8, struct.pack(">i", 20), "batch length 20 is below")],
)
def test_corrupt_batches_name_their_position(read, file_of, big, at, value, message):
    index = next(i for i, b in enumerate(BATCHES[1:], 1) if (b[1] >= 64 * KIB) == big)
    position = BATCHES[index][0]
    data = bytearray(SEGMENT)
    data[position + at : position + at + len(value)] = value
    with pytest.raises(ValueError, match=f"position {position}: {message}"):
        read_all(read, file_of(bytes(data)), data, 0, 10 * 1024 * KIB, 0)


@pytest.mark.parametrize("read", READERS)
def test_bytes_not_in_the_page_cache_are_left_to_a_blocking_read(read, segment_fd):
    args = (segment_fd, 0, len(SEGMENT), 1024 * KIB, 0, -1, 1, 2, 3)

    def refused() -> bool:
        try:
            read(*args, True)
        except BlockingIOError:
            return True
        return False

    assert until_evicted(segment_fd, refused)
    blocking = read(*args, False)
    assert read(*args, True) == blocking  # now cached


def test_read_batch_message_reads_evicted_bytes_on_a_thread(segment_fd):
    os.fsync(segment_fd)
    os.posix_fadvise(segment_fd, 0, 0, os.POSIX_FADV_DONTNEED)
    read = asyncio.run(
        read_batch_message(
            segment_fd,
            0,
            len(SEGMENT),
            max_bytes=1024 * KIB,
            from_offset=0,
            until_offset=None,
            source="segment x",
        )
    )
    assert read.message is not None
    parsed = pb.ReadOffsetRangeResponse.FromString(read.message.message)
    assert parsed.records == SEGMENT[: read.next_position]
    assert read.message.size == read.next_position
    assert (read.message.first_offset, read.message.last_offset) == (
        parsed.first_offset,
        parsed.last_offset,
    )
    assert not read.reached_end


def test_read_batch_message_names_the_source_of_a_failure(file_of):
    fd = file_of(b"\x00" * 100)

    def read(position, limit):
        return asyncio.run(
            read_batch_message(
                fd,
                position,
                limit,
                max_bytes=KIB,
                from_offset=0,
                until_offset=None,
                source="segment x",
            )
        )

    with pytest.raises(CorruptRecordError, match="segment x: position 0: batch length 0"):
        read(0, 100)
    with pytest.raises(RemoteStorageError, match="segment x: the stored log ended at byte 100"):
        read(100, 200)
