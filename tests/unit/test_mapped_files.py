"""MappedFiles: views of page-cached bytes, None for what a disk must supply, files as they are."""

from __future__ import annotations

import os
import tempfile

import pytest
from support.waiting import eventually

from remotelog.segmentstore import mapped
from remotelog.segmentstore.mapped import MappedFiles, cached_pages

MIB = 1024 * 1024
DATA = os.urandom(3 * MIB + 123)


def _kernel_counts_cached_pages() -> bool:
    with tempfile.TemporaryFile() as probe:
        return cached_pages(probe.fileno(), 0, 1) is not None


# Linux 6.5+ (cachestat); elsewhere the store keeps its preads, tested in test_pagecache.py.
pytestmark = pytest.mark.skipif(
    not _kernel_counts_cached_pages(), reason="this kernel cannot count cached pages"
)


@pytest.fixture
def segment(tmp_path):
    path = tmp_path / "segment.log"
    path.write_bytes(DATA)  # just written: every page is in the page cache
    return path


def held_open(path) -> bool:
    """Whether a descriptor of this process names `path` (the mapping's own dup included)."""
    return any(os.path.realpath(f"/proc/self/fd/{fd}") == str(path) for fd in fd_numbers())


def fd_numbers() -> list[str]:
    return os.listdir("/proc/self/fd")


def drop_from_page_cache(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_every_page_of_a_just_written_file_is_counted_as_cached(segment):
    # The machine the suite runs on has cachestat (Linux 6.5+): the mapped path is tested.
    fd = os.open(segment, os.O_RDONLY)
    try:
        assert cached_pages(fd, 0, len(DATA)) == mapped.pages_in(0, len(DATA))
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, len(DATA) - 1), (0, 0), (4093, 4093 + MIB + 6), (len(DATA) - 100, len(DATA) + 5000)],
)
def test_cached_bytes_are_views_of_the_file(segment, start, end):
    files = MappedFiles()
    view = files.view(segment, start, end)
    assert isinstance(view, memoryview)
    assert view == DATA[start : end + 1]
    files.close()


def test_a_range_past_the_end_and_an_empty_file_are_empty(segment, tmp_path):
    files = MappedFiles()
    assert files.view(segment, len(DATA) + 1, len(DATA) + 10) == b""
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert files.view(empty, 0, 100) == b""
    files.close()


def test_bytes_not_in_the_page_cache_are_not_lent(segment):
    files = MappedFiles()
    drop_from_page_cache(segment)
    assert files.view(segment, MIB, 2 * MIB - 1) is None
    with open(segment, "rb") as f:  # a blocking read brings them in
        f.seek(MIB)
        f.read(MIB)
    assert files.view(segment, MIB, 2 * MIB - 1) == DATA[MIB : 2 * MIB]
    assert files.available()
    files.close()


def test_a_file_renamed_over_is_read_anew_and_old_views_keep_their_bytes(segment, tmp_path):
    files = MappedFiles()
    old = files.view(segment, 0, 99)
    replacement = tmp_path / "upload.tmp"
    other = os.urandom(len(DATA))
    replacement.write_bytes(other)
    replacement.rename(segment)  # a retried upload
    assert files.view(segment, 0, 99) == other[:100]
    assert old == DATA[:100]  # still mapped for whoever holds the view
    assert held_open(segment)
    files.close()


def test_a_deleted_file_is_not_found_and_its_mapping_let_go(segment):
    files = MappedFiles()
    assert files.view(segment, 0, 10) == DATA[:11]
    assert held_open(segment)
    segment.unlink()
    with pytest.raises(FileNotFoundError):
        files.view(segment, 0, 10)
    assert len(files) == 0  # no descriptor pins the deleted file's space
    assert not held_open(f"{segment} (deleted)")


def test_at_most_max_files_stay_mapped(tmp_path):
    files = MappedFiles(max_files=2)
    paths = []
    for number in range(3):
        path = tmp_path / f"{number}.log"
        path.write_bytes(DATA[:10_000])
        paths.append(path)
        assert files.view(path, 0, 9) == DATA[:10]
    assert len(files) == 2
    # The least recently read went, descriptor and all.
    assert [held_open(p) for p in paths] == [False, True, True]
    files.close()
    assert [held_open(p) for p in paths] == [False, False, False]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


def test_mappings_unread_for_idle_s_are_dropped_at_the_next_read(tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(mapped, "time", clock)
    files = MappedFiles(idle_s=30)
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    for path in (first, second):
        path.write_bytes(DATA[:10_000])
    files.view(first, 0, 9)
    clock.now += 31
    files.view(second, 0, 9)
    assert len(files) == 1
    assert not held_open(first)
    files.close()


async def test_idle_mappings_are_dropped_without_any_read(segment):
    files = MappedFiles(idle_s=0.05)
    files.view(segment, 0, 9)
    assert len(files) == 1
    await eventually(lambda: len(files) == 0)  # the sweep timer, no read needed
    assert not held_open(segment)
    files.close()


def test_a_kernel_that_cannot_count_cached_pages_turns_the_mapping_off(segment, monkeypatch):
    monkeypatch.setattr(mapped, "cached_pages", lambda fd, offset, length: None)
    files = MappedFiles()
    assert files.view(segment, 0, 9) is None
    assert not files.available()
    assert len(files) == 0  # nothing kept open
    assert not held_open(segment)
