"""Azure Blob Storage backend (azure-storage-blob's aio client): Azure and Azurite.

An object above one part is uploaded as blocks (Put Block), in parallel, which
one Put Block List commits. Until then the blocks are uncommitted: the blob is
not there for reads or listings, but a listing that asks for uncommitted blobs
shows it, which is how `incomplete_uploads` finds what a killed store left.
Block ids are the upload's id and the part's number, all of one length as Azure
requires.

A copy by URL works the same way: the caller puts the blocks by SAS URLs of the one
blob, write only, and completing commits them here. A SAS signs no bytes, so the
caller's Content-MD5, which Azure checks, is the caller's own; the store checks
every block's size before it commits.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.storage.blob import BlobBlock, BlobSasPermissions, generate_blob_sas
from azure.storage.blob.aio import BlobServiceClient, ContainerClient

from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import (
    InvalidArgumentError,
    RemoteResourceNotFoundError,
    UnsupportedOperationError,
)
from remotelog.segmentstore.backend import IncompleteUpload, StoredObject, StoredPart
from remotelog.segmentstore.object_calls import CallPolicy, Calls, resuming_read, storage_error
from remotelog.segmentstore.parted_upload import PartedUpload

T = TypeVar("T")

_TRANSIENT_STATUSES = frozenset({408, 429})
_TRANSPORT_ERRORS = (
    AzureError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    ConnectionError,
    asyncio.IncompleteReadError,
)
_GET_SIZE = 4 * 1024 * 1024
# Azure takes blocks of any size; a floor keeps a caller's plan to few blocks.
MIN_SIGNED_PART_SIZE = 1024 * 1024
# What a part's block id encodes after the upload's id: its number, fixed width.
_NUMBER_DIGITS = 5


def _status(exc: BaseException) -> int:
    return int(getattr(exc, "status_code", 0) or 0) if isinstance(exc, HttpResponseError) else 0


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, HttpResponseError) and _status(exc):
        status = _status(exc)
        return status >= 500 or status in _TRANSIENT_STATUSES
    # Connection refused or cut, timeouts (ServiceRequestError, ServiceResponseError).
    return isinstance(exc, _TRANSPORT_ERRORS) and not isinstance(exc, HttpResponseError)


def _translate(exc: BaseException, what: str) -> Exception:
    not_found = isinstance(exc, ResourceNotFoundError) or _status(exc) == 404
    code = getattr(exc, "error_code", None)
    # The SDK's messages run to many lines (the whole response): its status and code say it.
    detail = f"HTTP {_status(exc)} {code}" if _status(exc) else str(exc).splitlines()[0]
    return storage_error(exc, what, not_found=not_found, transient=is_transient(exc), detail=detail)


@dataclass(frozen=True)
class AzureSettings:
    container: str
    account_name: str
    # The account's blob endpoint (Azurite's: http://127.0.0.1:10000/devstoreaccount1);
    # empty = https://<account>.blob.core.windows.net.
    endpoint_url: str
    # One of these, or none for DefaultAzureCredential (azure-identity).
    connection_string: str
    account_key: str
    sas_token: str
    block_size: int
    concurrency: int
    backoff: ExponentialBackoff
    default_retry_s: float = 60.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    list_page_size: int = 5000  # Azure's largest


def _block_id(upload_id: str, number: int) -> str:
    return base64.b64encode(f"{upload_id}{number:0{_NUMBER_DIGITS}d}".encode()).decode()


def _service(settings: AzureSettings) -> tuple[BlobServiceClient, Any]:
    """The account's client, and a credential to close with it (DefaultAzureCredential)."""
    options: dict[str, Any] = {
        "retry_total": 0,  # one retry policy: ours
        "connection_timeout": settings.connect_timeout_s,
        "read_timeout": settings.read_timeout_s,
        "max_single_put_size": settings.block_size,
        "max_block_size": settings.block_size,
        # A read's GETs: the SDK holds each in memory before it yields it (its default
        # first GET is 32 MiB), so they stay the size of the store's fetch chunks.
        "max_single_get_size": _GET_SIZE,
        "max_chunk_get_size": _GET_SIZE,
    }
    if settings.connection_string:
        return BlobServiceClient.from_connection_string(settings.connection_string, **options), None
    if not settings.account_name:
        raise InvalidArgumentError(
            "storage.azure.account.name",
            "is required with storage.backend=azure, unless storage.azure.connection.string is set",
        )
    url = settings.endpoint_url or f"https://{settings.account_name}.blob.core.windows.net"
    if settings.account_key:
        credential: Any = {
            "account_name": settings.account_name,
            "account_key": settings.account_key,
        }
        return BlobServiceClient(url, credential=credential, **options), None
    if settings.sas_token:
        return BlobServiceClient(url, credential=settings.sas_token.lstrip("?"), **options), None
    from azure.identity.aio import DefaultAzureCredential

    credential = DefaultAzureCredential()
    return BlobServiceClient(url, credential=credential, **options), credential


class AzureStore:
    def __init__(self, settings: AzureSettings, service: BlobServiceClient, credential: Any):
        self.settings = settings
        self._service = service
        self._credential = credential
        self._container: ContainerClient = service.get_container_client(settings.container)
        self._calls = Calls(
            CallPolicy(
                f"{service.url.rstrip('/')}/{settings.container}",
                settings.backoff,
                is_transient,
                _translate,
                _TRANSPORT_ERRORS,
                settings.default_retry_s,
            )
        )

    @classmethod
    async def open(cls, settings: AzureSettings) -> AzureStore:
        service, credential = _service(settings)
        return cls(settings, service, credential)

    async def close(self) -> None:
        if not self._calls.closed:
            self._calls.closed = True
            await self._container.close()
            await self._service.close()
            if self._credential is not None:
                await self._credential.close()

    async def call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        return await self._calls(what, operation)

    def blob(self, key: str) -> Any:
        return self._container.get_blob_client(key)

    def open_upload(self, key: str) -> AzureUpload:
        return AzureUpload(self, key)

    async def put(self, key: str, data: bytes) -> None:
        await self.call(key, partial(self.blob(key).upload_blob, data, overwrite=True))

    async def get(self, key: str) -> bytes:
        async def attempt() -> bytes:
            download = await self.blob(key).download_blob()
            return bytes(await download.readall())

        return await self.call(key, attempt)

    def read(
        self, key: str, start: int, end: int | None, chunk_size: int
    ) -> AsyncGenerator[bytes, None]:
        return resuming_read(self._calls, key, start, end, chunk_size, partial(self._range, key))

    async def _range(self, key: str, start: int, end: int | None) -> _Body | None:
        length = None if end is None else end - start + 1
        try:
            download = await self.blob(key).download_blob(offset=start, length=length)
        except HttpResponseError as exc:
            if _status(exc) == 416:  # the range starts past the object's end
                return None
            raise
        return _Body(download)

    def _sas(self, what: str, key: str, expires_in_s: int, permission: BlobSasPermissions) -> str:
        """A SAS of the one blob `key`, signed here with the account's key (no request
        to Azure); UnsupportedOperationError naming the settings where there is none."""
        credential = self._service.credential
        account_key = getattr(credential, "account_key", None)
        if not account_key:
            raise UnsupportedOperationError(
                f"an azure store signs {what} with its account key "
                "(storage.azure.account.key, or a connection string that holds one): "
                "without one, segments go through the store"
            )
        return generate_blob_sas(
            account_name=credential.account_name,
            container_name=self.settings.container,
            blob_name=key,
            account_key=account_key,
            permission=permission,
            expiry=datetime.now(UTC) + timedelta(seconds=expires_in_s),
        )

    async def presigned_get_url(self, key: str, expires_in_s: int) -> str:
        """A read-only SAS URL of the one blob `key`; ranges go by a Range header."""
        sas = self._sas("fetch URLs", key, expires_in_s, BlobSasPermissions(read=True))
        return f"{self.blob(key).url}?{sas}"

    # -- uploads by URL: blocks put by the caller, committed here -----------------

    @property
    def min_part_size(self) -> int:
        return MIN_SIGNED_PART_SIZE

    async def start_multipart(self, key: str) -> str:
        """An upload id for block ids (Azure keeps no upload until the first block)."""
        self._sas("upload URLs", key, 1, BlobSasPermissions(write=True))
        return uuid.uuid4().hex

    async def presigned_part_url(
        self, key: str, upload_id: str, number: int, expires_in_s: int, md5: str
    ) -> str:
        """A Put Block of part `number`: Azure checks its bytes against the caller's
        Content-MD5, though no SAS can sign one."""
        sas = self._sas("upload URLs", key, expires_in_s, BlobSasPermissions(write=True))
        # On the wire, as the SDK sends ours: it base64s every block id once more.
        wire_id = base64.b64encode(_block_id(upload_id, number).encode()).decode()
        block = quote(wire_id, safe="")
        return f"{self.blob(key).url}?comp=block&blockid={block}&{sas}"

    async def presigned_put_url(self, key: str, expires_in_s: int, md5: str) -> str:
        """A Put Blob of `key` (x-ms-blob-type: BlockBlob, signed_put_headers)."""
        sas = self._sas("upload URLs", key, expires_in_s, BlobSasPermissions(write=True))
        return f"{self.blob(key).url}?{sas}"

    @property
    def signed_put_headers(self) -> dict[str, str]:
        return {"x-ms-blob-type": "BlockBlob"}

    async def uploaded_parts(self, key: str, upload_id: str) -> list[StoredPart]:
        """The upload's blocks put so far, by number; others (another upload's) left
        out. Nothing put: no blob, RemoteResourceNotFoundError."""
        _, blocks = await self.call(key, partial(self.blob(key).get_block_list, "uncommitted"))
        parts = []
        for block in blocks:
            name = base64.b64decode(block.id).decode()
            if name[:-_NUMBER_DIGITS] == upload_id:
                parts.append(StoredPart(int(name[-_NUMBER_DIGITS:]), int(block.size), block.id))
        return sorted(parts, key=lambda p: p.number)

    async def complete_multipart(self, key: str, upload_id: str, parts: list[StoredPart]) -> None:
        await self.commit_blocks(key, [p.etag for p in parts])

    async def commit_blocks(self, key: str, block_ids: list[str]) -> None:
        blocks = [BlobBlock(block_id=block_id) for block_id in block_ids]
        await self.call(key, partial(self.blob(key).commit_block_list, blocks))

    async def head(self, key: str) -> StoredPart:
        found = await self.call(key, self.blob(key).get_blob_properties)
        return StoredPart(0, int(found.size), str(found.etag))

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                await self.call(key, self.blob(key).delete_blob)
            except RemoteResourceNotFoundError:
                continue

    async def _listed(self, prefix: str, *include: str) -> AsyncIterator[Any]:
        """Blobs under `prefix`, by name, a page at a time: a page that fails is asked
        for again from its continuation token (a pager that raised cannot go on)."""
        token: str | None = None

        async def page() -> tuple[list[Any], str | None]:
            listing = self._container.list_blobs(
                name_starts_with=prefix,
                include=list(include) or None,
                results_per_page=self.settings.list_page_size,
            )
            pages: Any = listing.by_page(continuation_token=token)
            try:
                items = [item async for item in await pages.__anext__()]
            except StopAsyncIteration:
                return [], None
            return items, pages.continuation_token

        while True:
            items, token = await self.call(prefix, page)
            for item in items:
                yield item
            if not token:
                return

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        async for item in self._listed(prefix):
            yield StoredObject(item.name, int(item.size), item.last_modified.timestamp())

    async def incomplete_uploads(self, prefix: str) -> AsyncIterator[IncompleteUpload]:
        """Blobs with uncommitted blocks and nothing committed: both listings are by
        name, so one walk through them side by side tells them apart."""
        committed = aiter(self._listed(prefix))
        next_committed = await anext(committed, None)
        async for item in self._listed(prefix, "uncommittedblobs"):
            while next_committed is not None and next_committed.name < item.name:
                next_committed = await anext(committed, None)
            if next_committed is not None and next_committed.name == item.name:
                continue
            _, blocks = await self.call(
                item.name, partial(self.blob(item.name).get_block_list, "uncommitted")
            )
            upload_id = base64.b64decode(blocks[0].id)[:-_NUMBER_DIGITS].decode() if blocks else ""
            initiated = (item.creation_time or item.last_modified).timestamp()
            yield IncompleteUpload(item.name, upload_id, initiated)

    async def _committed(self, key: str) -> bool:
        """Whether a blob is committed under `key` (uncommitted blocks alone are none)."""
        try:
            await self.call(key, self.blob(key).get_blob_properties)
        except RemoteResourceNotFoundError:
            return False
        return True

    async def abort_upload(self, upload: IncompleteUpload) -> None:
        """Drop a blob's uncommitted blocks, never a committed blob: if one was committed
        meanwhile, its uncommitted blocks are Azure's to discard (at the next commit, or
        after a week). Nothing can delete blocks alone, so the check comes first; a commit
        between the two would be a second copy of one segment, which the store never
        makes while it sweeps uploads older than any copy's timeout."""
        blob = self.blob(upload.key)
        if await self._committed(upload.key):
            return
        try:
            await self.call(upload.key, blob.delete_blob)
        except RemoteResourceNotFoundError:
            return  # Azure itself discards blocks nobody commits


class _Body:
    """A ranged download, re-cut to the reader's chunk size from the SDK's own GETs."""

    def __init__(self, download: Any) -> None:
        self.length = int(download.size)
        self._download = download

    async def chunks(self, chunk_size: int) -> AsyncGenerator[bytes, None]:
        pending = bytearray()
        async for piece in self._download.chunks():
            if not pending and len(piece) == chunk_size:
                yield bytes(piece)
                continue
            pending += piece
            while len(pending) >= chunk_size:
                yield bytes(pending[:chunk_size])
                del pending[:chunk_size]
        if pending:
            yield bytes(pending)

    def close(self) -> None:
        return None


class AzureUpload(PartedUpload[AzureStore]):
    """One Put Blob when the object fits one block, else blocks committed as a list."""

    def __init__(self, store: AzureStore, key: str) -> None:
        super().__init__(store, key, store.settings.block_size, store.settings.concurrency)

    async def _put_part(self, upload_id: str, number: int, part: bytes) -> str:
        block_id = _block_id(upload_id, number)
        stage = partial(self.store.blob(self.key).stage_block, block_id, part, length=len(part))
        await self.store.call(f"{self.key} block {number}", stage)
        return block_id

    async def _finish(self, upload_id: str, tags: list[tuple[int, str]]) -> None:
        await self.store.commit_blocks(self.key, [block_id for _, block_id in tags])

    async def _drop(self, upload_id: str) -> None:
        await self.store.abort_upload(IncompleteUpload(self.key, upload_id, 0.0))
