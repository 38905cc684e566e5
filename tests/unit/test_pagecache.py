"""pread_cached: page-cached bytes on the caller's thread, None for what a disk must supply.
start_writeback: dirty bytes sent to the disk without waiting.

Both the compiled functions and the Python references answer every case alike.
"""

import os
import time

import pytest

from remotelog.segmentstore import filesystem, pagecache
from remotelog.segmentstore.filesystem import FileSystemStore

READERS = [pytest.param(pagecache._pread_cached_python, id="python")]
WRITEBACKS = [pytest.param(pagecache._start_writeback_python, id="python")]
if pagecache.COMPILED:
    READERS.append(pytest.param(pagecache.pread_cached, id="compiled"))
    WRITEBACKS.append(pytest.param(pagecache.start_writeback, id="compiled"))

DATA = os.urandom(3 * 1024 * 1024 + 123)


def test_the_compiled_reader_is_built():
    assert pagecache.COMPILED  # `make setup` requires the C extensions


@pytest.fixture
def written(tmp_path):
    path = tmp_path / "segment.log"
    path.write_bytes(DATA)  # just written: every page is in the page cache
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize(
    ("length", "offset"),
    [
        (len(DATA), 0),
        (1, 0),
        (1024 * 1024 + 7, 4093),
        (0, 10),
        (500, len(DATA) - 100),
        (10, len(DATA) + 5),
    ],
)
def test_cached_bytes_are_read_as_pread_reads_them(read, written, length, offset):
    assert read(written, length, offset) == os.pread(written, length, offset)


@pytest.mark.parametrize("read", READERS)
def test_bytes_not_in_the_page_cache_are_not_read(read, written):
    os.fsync(written)  # clean pages can be dropped
    os.posix_fadvise(written, 0, 0, os.POSIX_FADV_DONTNEED)
    assert read(written, 1024 * 1024, 1024 * 1024) is None
    assert os.pread(written, 1024 * 1024, 1024 * 1024)  # a blocking read brings them in
    assert read(written, 1024 * 1024, 1024 * 1024) == DATA[1024 * 1024 : 2 * 1024 * 1024]


@pytest.mark.parametrize("read", READERS)
def test_bad_arguments_are_refused(read, written):
    with pytest.raises(ValueError, match="negative"):
        read(written, -1, 0)
    with pytest.raises(ValueError, match="negative"):
        read(written, 1, -1)
    with pytest.raises(OSError, match="Bad file descriptor"):
        read(999_999, 10, 0)  # not a descriptor


@pytest.mark.parametrize("cached", [True, False], ids=["page-cached", "from-disk"])
async def test_short_ranges_read_alike_from_the_cache_and_through_the_reader_threads(
    tmp_path, monkeypatch, cached
):
    if not cached:  # as if nothing were cached: every read takes the thread hop
        monkeypatch.setattr(filesystem, "pread_cached", lambda fd, length, offset: None)
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    await store.put("t-x/0/segment.log", DATA)
    for start, end, chunk in [(0, 0, 1024), (10, 1_500_000, 1024 * 1024), (5, 99, 10)]:
        chunks = [c async for c in store.read("t-x/0/segment.log", start, end, chunk)]
        assert b"".join(chunks) == DATA[start : end + 1]
        assert all(len(c) <= chunk for c in chunks)
    with pytest.raises(filesystem.RemoteResourceNotFoundError):
        [c async for c in store.read("t-x/0/missing.log", 0, 10, 1024)]
    await store.close()


def _dirty_bytes():
    """The kernel's count of dirty page-cache bytes, all files together."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("Dirty:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Dirty line in /proc/meminfo")


@pytest.mark.parametrize("start_writeback", WRITEBACKS)
def test_started_writeback_cleans_the_written_pages(start_writeback, tmp_path):
    size = 64 * 1024 * 1024
    fd = os.open(tmp_path / "upload.tmp", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        before = _dirty_bytes()
        os.write(fd, os.urandom(size))
        written = _dirty_bytes()
        if written - before < size // 2:
            pytest.skip("this filesystem's pages are not counted dirty (tmpfs?)")
        # Left alone the kernel keeps them dirty for dirty_expire (30 s) and
        # more; started, the writeback cleans them at once. Polled, not timed:
        # the write is started, not waited for.
        start_writeback(fd, 0, size)
        deadline = time.monotonic() + 10
        while _dirty_bytes() > written - size * 3 // 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _dirty_bytes() <= written - size * 3 // 4
    finally:
        os.close(fd)


@pytest.mark.parametrize("start_writeback", WRITEBACKS)
def test_writeback_refuses_bad_arguments(start_writeback, tmp_path):
    with pytest.raises(ValueError, match="negative"):
        start_writeback(0, -1, 10)
    with pytest.raises(ValueError, match="negative"):
        start_writeback(0, 0, -10)
    with pytest.raises(OSError, match="Bad file descriptor"):
        start_writeback(999_999, 0, 10)


async def test_an_upload_starts_the_writeback_of_each_piece_it_writes(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(
        filesystem, "start_writeback", lambda fd, offset, length: started.append((offset, length))
    )
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    upload = store.open_upload("t-x/0/segment.log")
    pieces = [DATA[:1000], DATA[1000 : 1024 * 1024], DATA[1024 * 1024 :]]
    for piece in pieces:
        await upload.write(piece)
    assert await upload.complete() == len(DATA)
    assert started == [
        (0, 1000),
        (1000, 1024 * 1024 - 1000),
        (1024 * 1024, len(DATA) - 1024 * 1024),
    ]
    assert (tmp_path / "store" / "t-x/0/segment.log").read_bytes() == DATA
    await store.close()
