"""The client's kept descriptors of stored logs (remotelog.client.short_circuit.Descriptors)."""

import os

import pytest
from support.page_cache import until_evicted

from remotelog.client.short_circuit import Descriptors
from remotelog.fileio.pagecache import cached_pages


def opened(path, data: bytes) -> int:
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY)


def test_a_kept_descriptor_reads_its_file_until_the_file_loses_its_name(tmp_path):
    kept = Descriptors()
    fd = opened(tmp_path / "a.log", b"abc")
    kept.keep("a", fd, 3)
    os.close(fd)  # the caller's own; the kept one stays open
    taken = kept.take("a")
    assert taken is not None
    assert os.pread(taken[0], 3, 0) == b"abc"
    assert taken[1] == 3
    os.close(taken[0])
    os.unlink(tmp_path / "a.log")
    assert kept.take("a") is None  # deleted: asked for anew
    assert kept.take("b") is None
    kept.close()


def test_the_oldest_and_the_idle_go_and_their_descriptors_close(tmp_path):
    before = set(os.listdir("/proc/self/fd"))
    kept = Descriptors(max_entries=2, idle_s=60)
    for name in "abc":
        fd = opened(tmp_path / name, name.encode())
        kept.keep(name, fd, 1)
        os.close(fd)
    assert kept.take("a") is None  # the oldest, over max_entries
    taken = kept.take("c")
    assert taken is not None
    os.close(taken[0])
    kept.idle_s = 0
    assert kept.take("b") is None  # idle
    assert kept.take("c") is None
    assert set(os.listdir("/proc/self/fd")) == before


def test_a_cached_range_is_a_view_of_the_kept_mapping(tmp_path):
    data = os.urandom(3 * 4096 + 100)
    kept = Descriptors()
    fd = opened(tmp_path / "a.log", data)  # just written: all in the page cache
    assert kept.cached_view("a", 0, 10) is None  # nothing kept yet
    kept.keep("a", fd, len(data))
    os.close(fd)
    if kept.cached_view("a", 0, 1) is None and cached_pages_unknown(tmp_path):
        pytest.skip("this kernel cannot count cached pages")
    view = kept.cached_view("a", 4000, 9000)
    assert isinstance(view, memoryview)
    assert view == data[4000:9000]
    assert kept.cached_view("a", 12_000, 1 << 20) == data[12_000:]  # clipped to the object
    assert kept.cached_view("a", len(data), len(data) + 5) is None
    os.unlink(tmp_path / "a.log")
    assert kept.cached_view("a", 0, 10) is None  # deleted: dropped, asked for anew
    assert view == data[4000:9000]  # a view lent before still reads its pages
    kept.close()


def test_bytes_not_in_the_page_cache_are_left_to_a_read(tmp_path):
    data = os.urandom(64 * 4096)
    kept = Descriptors()
    fd = opened(tmp_path / "a.log", data)
    kept.keep("a", fd, len(data))
    assert until_evicted(fd, lambda: kept.cached_view("a", 0, len(data)) is None)
    os.close(fd)
    taken = kept.take("a")
    assert taken is not None
    assert os.pread(taken[0], 4096, 8192) == data[8192:12288]  # the read brings them in
    os.close(taken[0])
    if not cached_pages_unknown(tmp_path):
        assert kept.cached_view("a", 8192, 12288) == data[8192:12288]
    kept.close()


def cached_pages_unknown(tmp_path) -> bool:
    probe = opened(tmp_path / "probe", b"x")
    try:
        return cached_pages(probe, 0, 1) is None
    finally:
        os.close(probe)
