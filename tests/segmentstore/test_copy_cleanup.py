"""A copy cancelled mid-way still cleans up, and the store's close waits for it."""

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from remotelog.core.model import SegmentFile
from remotelog.segmentstore.filesystem import FileSystemStore
from remotelog.segmentstore.store import SegmentChunk, SegmentStore, StoreOptions

from .segments import segment_metadata


class _SlowAbortStore(FileSystemStore):
    """Uploads whose abort waits for `release`, then fails as a backend gone away would."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.aborting = asyncio.Event()

    def open_upload(self, key: str):  # type: ignore[no-untyped-def]
        upload = super().open_upload(key)
        abort = upload.abort

        async def slow_abort() -> None:
            self.aborting.set()
            await self.release.wait()
            await abort()
            raise ConnectionError("the backend went away")

        upload.abort = slow_abort  # type: ignore[method-assign]
        return upload


async def test_a_cancelled_copy_is_cleaned_up_and_close_waits_for_it(tmp_path, caplog):
    objects = _SlowAbortStore(tmp_path)
    store = SegmentStore(objects, StoreOptions())
    stalled = asyncio.Event()

    async def chunks() -> AsyncIterator[SegmentChunk]:
        yield SegmentChunk(SegmentFile.LOG, 0, b"x" * 100)
        stalled.set()
        await asyncio.Event().wait()  # the client stops sending
        yield SegmentChunk(SegmentFile.LOG, 100, b"never")

    copy = asyncio.create_task(store.copy_log_segment_data(segment_metadata(size=200), chunks()))
    await stalled.wait()
    copy.cancel()
    await objects.aborting.wait()
    copy.cancel()  # again, as grpc does while the handler cleans up
    with pytest.raises(asyncio.CancelledError):
        await copy
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    assert not closing.done(), "close returned while a cleanup was still running"
    objects.release.set()
    with caplog.at_level(logging.WARNING, logger="remotelog.segmentstore.store"):
        await closing
    assert [r.getMessage() for r in caplog.records] == [
        "a failed copy's cleanup failed; it may leave objects behind: the backend went away"
    ]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
