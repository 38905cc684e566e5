"""An object uploaded in parts sent in parallel: what every cloud backend's Upload is.

S3 sends parts of a multipart upload, GCS part objects it composes, Azure blocks
it commits as a list. What they share lives here: pieces are cut into parts of
`part_size` as they are written, at most `concurrency` parts are in flight (so
memory stays below part size x (concurrency + 1) whatever the object's size),
an object that fits one part is one PUT, and a failed or abandoned upload drops
what it sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from abc import ABC, abstractmethod
from typing import Generic, Protocol, TypeVar

from remotelog.core.errors import RemoteResourceNotFoundError
from remotelog.segmentstore.backend import Chunk


class WholePuts(Protocol):
    async def put(self, key: str, data: bytes) -> None: ...


S = TypeVar("S", bound=WholePuts)


class PartedUpload(ABC, Generic[S]):
    def __init__(self, store: S, key: str, part_size: int, concurrency: int) -> None:
        self.store = store
        self.key = key
        self._part_size = part_size
        # Written pieces not sent yet, kept as they came: a part (or the single
        # PUT's body) is joined from them in one copy. Appending them to a
        # bytearray cost a copy per piece, its regrowths, and another copy out.
        self._pending: list[bytes | memoryview] = []
        self._pending_bytes = 0
        self.upload_id: str | None = None
        self._beginning: asyncio.Task[str] | None = None
        self._tags: dict[int, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._slots = asyncio.Semaphore(concurrency)
        self._size = 0

    async def _begin(self) -> str:
        """Start the upload with the store; its id (here one of its own, for stores
        whose uploads are named by their caller)."""
        return uuid.uuid4().hex

    async def _put_whole(self, body: bytes) -> None:
        """Write the whole object at once (it fits one part)."""
        await self.store.put(self.key, body)

    @abstractmethod
    async def _put_part(self, upload_id: str, number: int, part: bytes) -> str:
        """Send part `number` (from 1); what completing needs of it (S3's ETag)."""

    @abstractmethod
    async def _finish(self, upload_id: str, tags: list[tuple[int, str]]) -> None:
        """Make the parts, in number order, the object."""

    @abstractmethod
    async def _drop(self, upload_id: str) -> None:
        """Drop every part sent; RemoteResourceNotFoundError if the upload is gone."""

    async def write(self, data: Chunk) -> None:
        self._size += len(data)
        piece: bytes | memoryview = data
        # Strictly more than a part before one is sent: an object of exactly one part
        # is one PUT, not an upload of one part and its completion.
        while self._pending_bytes + len(piece) > self._part_size:
            cut = self._part_size - self._pending_bytes
            view = memoryview(piece)
            part = b"".join([*self._pending, view[:cut]])
            piece = view[cut:]
            self._pending, self._pending_bytes = [], 0
            await self._send_part(part)
        if len(piece):
            self._pending.append(piece)
            self._pending_bytes += len(piece)

    def _take_pending(self) -> bytes:
        body = b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        return body

    async def _send_part(self, part: bytes) -> None:
        for task in self._tasks:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        if self.upload_id is None:
            if self._beginning is None:
                self._beginning = asyncio.create_task(self._begin())
            # Shielded: a caller cancelled while the store starts the upload (its
            # request may already be there) leaves abort() the id, not an upload
            # nobody knows of.
            self.upload_id = await asyncio.shield(self._beginning)
        await self._slots.acquire()
        number = len(self._tasks) + 1
        self._tasks.append(asyncio.create_task(self._send(self.upload_id, number, part)))

    async def _send(self, upload_id: str, number: int, part: bytes) -> None:
        try:
            self._tags[number] = await self._put_part(upload_id, number, part)
        finally:
            self._slots.release()

    async def sent(self) -> None:
        """Wait for the parts in flight; the first one's failure, if any."""
        await asyncio.gather(*self._tasks)

    async def complete(self) -> int:
        if self.upload_id is None:
            await self._put_whole(self._take_pending())
            return self._size
        if self._pending:
            await self._send_part(self._take_pending())
        await self.sent()
        await self._finish(self.upload_id, sorted(self._tags.items()))
        self.upload_id = self._beginning = None
        return self._size

    async def abort(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._pending, self._pending_bytes = [], 0
        beginning, self._beginning = self._beginning, None
        if beginning is not None and self.upload_id is None:
            (made,) = await asyncio.gather(beginning, return_exceptions=True)
            if isinstance(made, str):
                self.upload_id = made
        upload_id, self.upload_id = self.upload_id, None
        if upload_id is not None:
            # Already gone (a scrub aborted it meanwhile) is what abort wants.
            with contextlib.suppress(RemoteResourceNotFoundError):
                await self._drop(upload_id)
