"""FileSystemStore: the chunks its reads give, and its thread hops (nothing abandoned leaks)."""

import asyncio
import errno
import os
import threading

import pytest
from support.waiting import eventually

from remotelog.core.config import load_config
from remotelog.core.errors import RemoteStorageError
from remotelog.segmentstore import filesystem, writeback
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.filesystem import FileSystemStore


async def test_a_result_its_caller_abandoned_is_released(tmp_path):
    store = FileSystemStore(tmp_path / "store", io_threads=1)
    started, finish = threading.Event(), threading.Event()
    released: list[int] = []

    def opening() -> int:
        started.set()
        finish.wait(5)
        return 42

    task = asyncio.create_task(store._run(opening, released.append))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    finish.set()
    await eventually(lambda: released)
    assert released == [42]
    await store.close()


async def test_reads_cancelled_at_any_point_leave_no_descriptor_open(tmp_path):
    store = FileSystemStore(tmp_path / "store", io_threads=4)
    await store.put("t-x/0/segment.log", os.urandom(3 * 1024 * 1024))
    before = len(os.listdir("/proc/self/fd"))

    async def read_some(chunks: int) -> None:
        taken = 0
        async for _ in store.read("t-x/0/segment.log", 0, None, 1024 * 1024):
            taken += 1
            if taken == chunks:
                return

    for number in range(60):
        task = asyncio.create_task(read_some(number % 4))
        await asyncio.sleep(0 if number % 2 else 0.0005)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Reader threads close what they opened after the cancellation reaches them.
    await eventually(lambda: len(os.listdir("/proc/self/fd")) == before)
    assert len(os.listdir("/proc/self/fd")) == before
    await store.close()


RANGES = [
    (0, None),
    (5_000, 17 * 1024 * 1024 + 7),  # unaligned start, across two 8 MiB blocks
    (8 * 1024 * 1024 - 3, 8 * 1024 * 1024 + 10),  # straddles a block boundary
    (20 * 1024 * 1024 + 100, None),  # the last bytes only
    (3 * 1024 * 1024, 10**12),  # an end past the object's end is its end
]


async def _read(store: FileSystemStore, start: int, end: int | None, chunk_size: int) -> list:
    return [chunk async for chunk in store.read("t-x/0/segment.log", start, end, chunk_size)]


@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "pread"])
async def test_long_reads_give_the_range_in_chunks_of_the_asked_size(tmp_path, monkeypatch, mapped):
    if mapped and filesystem.MAP_POPULATE is None:
        pytest.skip("no MAP_POPULATE here")
    if not mapped:
        monkeypatch.setattr(filesystem, "MAP_POPULATE", None)
    data = os.urandom(20 * 1024 * 1024 + 123)
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    await store.put("t-x/0/segment.log", data)
    for chunk_size in (1024 * 1024, 3 * 1024 * 1024 + 1):
        for start, end in RANGES:
            chunks = await _read(store, start, end, chunk_size)
            stop = len(data) if end is None else min(end + 1, len(data))
            assert b"".join(chunks) == data[start:stop], (chunk_size, start, end)
            assert all(len(c) == chunk_size for c in chunks[:-1])
            if end is None or end - start >= filesystem.CACHED_READ_MAX:
                # Mapped: views of the file's pages, copied by nobody here; else bytes.
                assert all(isinstance(c, memoryview if mapped else bytes) for c in chunks)
    await store.close()


async def test_mapped_pages_are_unmapped_once_the_chunks_are_dropped(tmp_path):
    if filesystem.MAP_POPULATE is None:
        pytest.skip("no MAP_POPULATE here")
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    await store.put("t-x/0/segment.log", os.urandom(12 * 1024 * 1024))
    path = str(store.path("t-x/0/segment.log"))

    def mappings() -> int:
        with open("/proc/self/maps") as maps:
            return sum(path in line for line in maps)

    chunks = await _read(store, 0, None, 1024 * 1024)
    assert mappings() == 2  # one mapping per 8 MiB block, held by its views
    del chunks
    assert mappings() == 0
    await store.close()


# -- uploads: writes overlapping the caller, writeback started as they go ---------------------

KIB = 1024
MIB = 1024 * KIB


def _temp_files(store: FileSystemStore) -> list[str]:
    return [name for _, _, files in os.walk(store.root) for name in files if name.endswith(".tmp")]


async def test_an_upload_starts_writeback_of_each_block_its_writes_fill(tmp_path, monkeypatch):
    started: list[tuple[int, int]] = []

    def recorded(fd: int, offset: int, length: int) -> bool:
        started.append((offset, length))
        return True

    monkeypatch.setattr(filesystem, "start_writeback", recorded)
    store = FileSystemStore(tmp_path / "store", io_threads=1, bytes_per_sync=MIB)
    data = os.urandom(10 * 384 * KIB)  # 3.75 MiB in writes that straddle the 1 MiB marks
    upload = store.open_upload("t-x/0/segment.log")
    for at in range(0, len(data), 384 * KIB):
        await upload.write(data[at : at + 384 * KIB])
    assert await upload.complete() == len(data)
    assert started == [(0, MIB), (MIB, MIB), (2 * MIB, MIB)]  # the last 0.75 MiB: the fsync's
    assert store.path("t-x/0/segment.log").read_bytes() == data
    await store.close()


async def test_writeback_stops_being_asked_where_the_system_has_none(tmp_path, monkeypatch):
    asked: list[int] = []

    def unsupported(fd: int, offset: int, length: int) -> bool:
        asked.append(offset)
        return False

    monkeypatch.setattr(filesystem, "start_writeback", unsupported)
    store = FileSystemStore(tmp_path / "store", io_threads=1, bytes_per_sync=MIB)
    data = os.urandom(4 * MIB)
    await store.put("t-x/0/segment.log", data)
    upload = store.open_upload("t-x/0/other.log")
    await upload.write(data)
    await upload.complete()
    assert asked == [0]  # asked once, then never again by this store
    assert store.bytes_per_sync == 0
    assert store.path("t-x/0/other.log").read_bytes() == data
    await store.close()


async def test_writes_run_while_the_caller_goes_on_up_to_a_bound(tmp_path, monkeypatch):
    gate = threading.Event()
    real = filesystem._pwrite_all

    def gated(fd: int, data: bytes, position: int) -> None:
        gate.wait(10)
        real(fd, data, position)

    monkeypatch.setattr(filesystem, "_pwrite_all", gated)
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    pieces = [os.urandom(100 * KIB) for _ in range(filesystem.WRITES_IN_FLIGHT + 2)]
    upload = store.open_upload("t-x/0/segment.log")
    for piece in pieces[: filesystem.WRITES_IN_FLIGHT]:
        await asyncio.wait_for(upload.write(piece), 5)  # none of them written yet
    blocked = asyncio.create_task(upload.write(pieces[filesystem.WRITES_IN_FLIGHT]))
    await asyncio.sleep(0.05)
    assert not blocked.done()  # one more would pass the bound: it waits for the oldest
    gate.set()
    await blocked
    await upload.write(pieces[-1])
    assert await upload.complete() == sum(map(len, pieces))
    assert store.path("t-x/0/segment.log").read_bytes() == b"".join(pieces)
    await store.close()


async def test_a_failed_write_fails_the_upload_and_abort_leaves_nothing(tmp_path, monkeypatch):
    real = filesystem._pwrite_all

    def full_disk_after_a_mib(fd: int, data: bytes, position: int) -> None:
        if position >= MIB:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data, position)

    monkeypatch.setattr(filesystem, "_pwrite_all", full_disk_after_a_mib)
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    descriptors = len(os.listdir("/proc/self/fd"))
    upload = store.open_upload("t-x/0/segment.log")

    async def write_then_complete() -> None:
        for _ in range(3 * filesystem.WRITES_IN_FLIGHT):
            await upload.write(os.urandom(512 * KIB))
        await upload.complete()

    with pytest.raises(RemoteStorageError, match="No space left"):
        await write_then_complete()
    await upload.abort()
    assert _temp_files(store) == []
    assert not store.path("t-x/0/segment.log").exists()
    assert len(os.listdir("/proc/self/fd")) == descriptors
    await store.close()


def test_start_writeback_on_a_file_a_pipe_and_a_closed_descriptor(tmp_path):
    if writeback._sync_file_range is None:
        pytest.skip("no sync_file_range here")
    with open(tmp_path / "file", "wb") as handle:
        handle.write(os.urandom(MIB))
        handle.flush()
        assert writeback.start_writeback(handle.fileno(), 0, MIB) is True
    read_end, write_end = os.pipe()
    try:
        assert writeback.start_writeback(write_end, 0, MIB) is False  # ESPIPE: not supported
    finally:
        os.close(read_end)
        os.close(write_end)
    with pytest.raises(OSError, match="Bad file descriptor") as raised:
        writeback.start_writeback(write_end, 0, MIB)
    assert raised.value.errno == errno.EBADF


async def test_the_filesystem_backend_takes_bytes_per_sync_from_its_config(tmp_path):
    path = tmp_path / "store.properties"
    path.write_text(
        f"storage.root={tmp_path / 'store'}\nstorage.filesystem.bytes.per.sync=2097152\n"
    )
    config, _ = load_config(SegmentStoreConfig, path)
    backend = await open_backend(config, config.backoff())
    assert isinstance(backend, FileSystemStore)
    assert backend.bytes_per_sync == 2 * MIB
    await backend.close()
    default, _ = load_config(SegmentStoreConfig, None)
    assert default.fs_bytes_per_sync == 4 * MIB


async def test_deleting_a_partitions_last_objects_removes_its_directories(tmp_path):
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    first, second = "orders-abc/0/00000000000000000000-x", "orders-abc/1/00000000000000000000-y"
    for key in (f"{first}.log", f"{first}.indexes", f"{second}.log"):
        await store.put(key, b"bytes")
    await store.delete([f"{first}.log", f"{first}.indexes"])
    left = sorted(p.relative_to(store.root).as_posix() for p in store.root.rglob("*"))
    assert left == ["orders-abc", "orders-abc/1", f"{second}.log"]
    await store.delete([f"{second}.log"])
    assert list(store.root.iterdir()) == []  # the root itself stays
    await store.delete([f"{second}.log"])  # again: nothing there, nothing to do
    await store.close()


async def test_an_upload_whose_directory_a_delete_removed_makes_it_again(tmp_path, monkeypatch):
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    real_open = os.open
    removed: list[str] = []

    def open_after_a_racing_delete(path, flags, mode=0o777, **kwargs):
        # What a delete of the partition's last segment does between mkdir and open.
        if str(path).endswith(filesystem.TMP_SUFFIX) and not removed:
            os.rmdir(os.path.dirname(path))
            removed.append(str(path))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", open_after_a_racing_delete)
    await store.put("t-x/0/00000000000000000042-new.log", b"new")
    monkeypatch.undo()
    assert removed
    assert store.path("t-x/0/00000000000000000042-new.log").read_bytes() == b"new"
    await store.close()


# -- uploads cancelled while a file thread works for them -------------------------------------


class _Gate:
    """Holds the first call of a file function on its thread until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def hold(self) -> None:
        if not self.entered.is_set():
            self.entered.set()
            self.released.wait(10)

    async def cancel_then_abort(self, caller: asyncio.Task, upload: filesystem.FileUpload) -> None:
        """Cancel `caller` while its job is held, abort, and only then let the job go on."""
        await asyncio.to_thread(self.entered.wait, 10)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        aborting = asyncio.create_task(upload.abort())
        await asyncio.sleep(0.1)  # room for an abort that does not wait to run ahead
        self.released.set()
        await aborting


async def test_an_upload_cancelled_while_its_file_is_made_leaves_no_file_or_descriptor(
    tmp_path, monkeypatch
):
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    gate = _Gate()
    real_open = os.open

    def held_open(path, flags, mode=0o777, **kwargs):
        if str(path).endswith(filesystem.TMP_SUFFIX):
            gate.hold()
        return real_open(path, flags, mode, **kwargs)

    descriptors = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "open", held_open)
    upload = store.open_upload("t-x/0/segment.log")
    await gate.cancel_then_abort(asyncio.create_task(upload.write(b"x" * KIB)), upload)
    monkeypatch.undo()
    assert _temp_files(store) == []
    assert len(os.listdir("/proc/self/fd")) == descriptors
    await store.close()
    assert _temp_files(store) == []


async def test_an_upload_cancelled_mid_copy_closes_its_file_only_once_the_copy_ends(
    tmp_path, monkeypatch
):
    store = FileSystemStore(tmp_path / "store", io_threads=2)
    source = tmp_path / "00000000000000000000.log"
    source.write_bytes(os.urandom(MIB))
    gate = _Gate()
    real_copy = os.copy_file_range
    target_open_when_copied: list[bool] = []

    def held_copy(src: int, dst: int, count: int, offset_src: int, offset_dst: int) -> int:
        gate.hold()
        try:
            os.fstat(dst)
            target_open_when_copied.append(True)
        except OSError:
            target_open_when_copied.append(False)
        return real_copy(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", held_copy)
    descriptors = len(os.listdir("/proc/self/fd"))
    fd = os.open(source, os.O_RDONLY)
    try:
        upload = store.open_upload("t-x/0/segment.log")
        copying = asyncio.create_task(upload.write_file(fd, 0, MIB))
        await gate.cancel_then_abort(copying, upload)
    finally:
        os.close(fd)
    assert target_open_when_copied == [True]  # one step: the whole MiB
    assert _temp_files(store) == []
    assert not store.path("t-x/0/segment.log").exists()
    assert len(os.listdir("/proc/self/fd")) == descriptors
    await store.close()


async def test_a_listing_is_in_key_order_as_s3_gives_it_and_streamed_in_batches(tmp_path):
    store = FileSystemStore(tmp_path / "store", io_threads=1)
    names = ["a.log", "a/x", "a/b/c", "a0", "a-1/0/y", "b/z.tmp.tmp", "b/y.abc.tmp", "c"]
    names += [f"many/{n:05d}.log" for n in range(2 * filesystem._LIST_BATCH + 7)]
    for name in names:
        path = store.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode())
    # A link out of the tree is not followed.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"no")
    (store.root / "a" / "link").symlink_to(outside, target_is_directory=True)
    try:
        objects = [o.key async for o in store.list("")]
        finished = sorted(n for n in names if not n.endswith(".tmp"))
        assert objects == finished
        assert {o.key: o.size for o in [o async for o in store.list("a")]} == {
            n: len(n) for n in finished if n.startswith("a")
        }
        assert [o.key async for o in store.list("a/")] == ["a/b/c", "a/x"]
        assert [o.key async for o in store.list("many/0200")] == [
            f"many/{n:05d}.log" for n in range(2000, 2007)
        ]
        uploads = [u async for u in store.incomplete_uploads("b/")]
        assert [(u.key, u.upload_id) for u in uploads] == [
            ("b/y", "y.abc.tmp"),
            ("b/z", "z.tmp.tmp"),
        ]
        assert [o.key async for o in store.list("nothing/here")] == []
    finally:
        await store.close()
