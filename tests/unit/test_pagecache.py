"""pread_cached: page-cached bytes on the caller's thread, None for what a disk must supply.

Both the compiled function and the Python reference answer every case alike.
"""

import os

import pytest
from support.page_cache import until_evicted

from remotelog.fileio import pagecache
from remotelog.segmentstore import filesystem
from remotelog.segmentstore.filesystem import FileSystemStore
from remotelog.segmentstore.mapped import MappedFiles

READERS = [pytest.param(pagecache._pread_cached_python, id="python")]
if pagecache.COMPILED:
    READERS.append(pytest.param(pagecache.pread_cached, id="compiled"))

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
    assert until_evicted(written, lambda: read(written, 1024 * 1024, 1024 * 1024) is None)
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


@pytest.mark.parametrize("way", ["mapped", "pread", "from-disk"])
async def test_short_ranges_read_alike_from_the_cache_and_through_the_reader_threads(
    tmp_path, monkeypatch, way
):
    if way != "mapped":  # as where the kernel cannot count cached pages
        monkeypatch.setattr(MappedFiles, "available", lambda self: False)
    if way == "from-disk":  # as if nothing were cached: every read takes the thread hop
        monkeypatch.setattr(filesystem, "pread_cached", lambda fd, length, offset: None)
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    await store.put("t-x/0/segment.log", DATA)
    for start, end, chunk in [(0, 0, 1024), (10, 1_500_000, 1024 * 1024), (5, 99, 10)]:
        chunks = [c async for c in store.read("t-x/0/segment.log", start, end, chunk)]
        assert b"".join(chunks) == DATA[start : end + 1]
        assert all(len(c) <= chunk for c in chunks)
        if way == "mapped":  # views of the file's pages, no copy made
            assert all(isinstance(c, memoryview) for c in chunks)
    with pytest.raises(filesystem.RemoteResourceNotFoundError):
        [c async for c in store.read("t-x/0/missing.log", 0, 10, 1024)]
    await store.delete(["t-x/0/segment.log"])  # read a moment ago, possibly still mapped
    with pytest.raises(filesystem.RemoteResourceNotFoundError):
        [c async for c in store.read("t-x/0/segment.log", 0, 10, 1024)]
    await store.close()
