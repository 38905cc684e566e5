"""Google Cloud Storage backend (gcloud-aio-storage, on aiohttp): GCS and its emulators.

An object above one part is uploaded as part objects, in parallel, which one
compose call (a tree of them past 32 parts) makes the object; the parts are then
deleted. Part objects lie beside their object's key, under STAGING, so an
operator's prefix-scoped permissions cover them, `list` leaves them out and
`incomplete_uploads` finds what a killed store left. GCS's resumable uploads
would need no parts, but send one chunk at a time and leave nothing to list.

A copy by URL works the same way: the caller PUTs the part objects by V4 signed
URLs (XML API), each signing the part's Content-MD5, which GCS checks the bytes
against; completing composes them here.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from gcloud.aio.storage import Storage

from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
    UnsupportedOperationError,
)
from remotelog.segmentstore.backend import IncompleteUpload, StoredObject, StoredPart
from remotelog.segmentstore.gcs_signing import ServiceAccountSigner
from remotelog.segmentstore.object_calls import (
    CallPolicy,
    Calls,
    StreamBody,
    content_md5,
    resuming_read,
    storage_error,
)
from remotelog.segmentstore.parted_upload import PartedUpload

T = TypeVar("T")

# Part objects of an upload: <key>/.remotelog-upload/<upload id>/<part>.
STAGING = "/.remotelog-upload/"
# GCS composes at most this many objects at once.
MAX_COMPOSE = 32
OCTET_STREAM = "application/octet-stream"
# Compose takes parts of any size; a floor keeps a caller's plan to few composes.
MIN_SIGNED_PART_SIZE = 1024 * 1024
# V4 signatures last at most a week.
MAX_URL_EXPIRY_S = 7 * 24 * 3600
_TRANSIENT_STATUSES = frozenset({408, 429})
_TRANSPORT_ERRORS = (
    aiohttp.ClientError,
    asyncio.TimeoutError,
    ConnectionError,
    asyncio.IncompleteReadError,
)


def _status(exc: BaseException) -> int:
    return exc.status if isinstance(exc, aiohttp.ClientResponseError) else 0


def is_transient(exc: BaseException) -> bool:
    status = _status(exc)
    if status:
        return status >= 500 or status in _TRANSIENT_STATUSES
    return isinstance(exc, _TRANSPORT_ERRORS)


def _translate(exc: BaseException, what: str) -> Exception:
    status = _status(exc)
    detail = f"HTTP {status} {getattr(exc, 'message', '')}" if status else ""
    return storage_error(
        exc, what, not_found=status == 404, transient=is_transient(exc), detail=detail
    )


@dataclass(frozen=True)
class GcsSettings:
    bucket: str
    # The JSON API's root (an emulator's); None = Google's.
    endpoint_url: str | None
    # A service account's key, as a file or its JSON; neither = Application Default
    # Credentials, or none at all against an emulator's endpoint.
    credentials_path: str
    credentials_json: str
    part_size: int
    concurrency: int
    backoff: ExponentialBackoff
    default_retry_s: float = 60.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0


def _epoch_s(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _part_key(key: str, upload_id: str, name: str) -> str:
    return f"{key}{STAGING}{upload_id}/{name}"


class GcsStore:
    def __init__(self, settings: GcsSettings, storage: Storage, session: aiohttp.ClientSession):
        self.settings = settings
        self.bucket = settings.bucket
        self._storage = storage
        self._session = session
        self._url_signer: ServiceAccountSigner | None = None
        self._calls = Calls(
            CallPolicy(
                f"gs://{settings.bucket}",
                settings.backoff,
                is_transient,
                _translate,
                _TRANSPORT_ERRORS,
                settings.default_retry_s,
            )
        )
        # Per call: connecting, and each wait for the next bytes; a long body is no
        # timeout. (gcloud-aio's int timeouts are totals; it passes this one on as it is.)
        self._timeout: Any = aiohttp.ClientTimeout(
            total=None, sock_connect=settings.connect_timeout_s, sock_read=settings.read_timeout_s
        )

    @classmethod
    async def open(cls, settings: GcsSettings) -> GcsStore:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max(10, settings.concurrency * 4)),
            auto_decompress=False,
        )
        service_file: str | io.StringIO | None = settings.credentials_path or None
        if settings.credentials_json:
            service_file = io.StringIO(settings.credentials_json)
        storage = Storage(
            service_file=service_file,
            session=session,  # type: ignore[arg-type]
            api_root=settings.endpoint_url or None,
        )
        return cls(settings, storage, session)

    async def close(self) -> None:
        if not self._calls.closed:
            self._calls.closed = True
            await self._storage.close()
            await self._session.close()

    async def call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        return await self._calls(what, operation)

    def open_upload(self, key: str) -> GcsUpload:
        return GcsUpload(self, key)

    async def put(self, key: str, data: bytes) -> None:
        await self.call(key, partial(self._put, key, data))

    async def _put(self, key: str, data: bytes) -> None:
        await self._storage.upload(
            self.bucket,
            key,
            data,
            content_type=OCTET_STREAM,
            force_resumable_upload=False,
            timeout=self._timeout,
        )

    async def get(self, key: str) -> bytes:
        timeout: Any = self._timeout  # an int is a total; this bounds each wait instead
        return await self.call(
            key, partial(self._storage.download, self.bucket, key, timeout=timeout)
        )

    def read(
        self, key: str, start: int, end: int | None, chunk_size: int
    ) -> AsyncGenerator[bytes, None]:
        return resuming_read(self._calls, key, start, end, chunk_size, partial(self._range, key))

    async def _range(self, key: str, start: int, end: int | None) -> StreamBody | None:
        byte_range = f"bytes={start}-{'' if end is None else end}"
        try:
            stream = await self._storage.download_stream(
                self.bucket,
                key,
                headers={"Range": byte_range},
                timeout=self._timeout,
            )
        except aiohttp.ClientResponseError as exc:
            if exc.status == 416:  # the range starts past the object's end
                return None
            raise
        response: aiohttp.ClientResponse = stream._response
        if response.status == 200 and start > 0:
            # A server that ignored the range (sent the whole object) is of no use.
            response.close()
            raise RemoteStorageError(
                f"gs://{self.bucket}/{key}: the range {byte_range} was ignored"
            )
        return StreamBody(int(response.headers.get("Content-Length", 0)), response)

    def _signer(self, what: str) -> ServiceAccountSigner:
        """The service account's key URLs are signed with; UnsupportedOperationError
        naming the settings where the store has none (Application Default Credentials)."""
        if self._url_signer is None:
            service = self._storage.token.service_data
            if not service.get("private_key"):
                raise UnsupportedOperationError(
                    f"a gcs store signs {what} with a service account's key "
                    "(storage.gcs.credentials.path or storage.gcs.credentials.json): "
                    "without one, segments go through the store"
                )
            self._url_signer = ServiceAccountSigner.of(
                service["client_email"], service["private_key"]
            )
        return self._url_signer

    def _signed_url(
        self, what: str, method: str, key: str, expires_in_s: int, headers: dict[str, str]
    ) -> str:
        signer = self._signer(what)
        url = signer.signed_url(
            method, self.bucket, key, min(expires_in_s, MAX_URL_EXPIRY_S), headers
        )
        if self.settings.endpoint_url:
            # Signed for GCS's own host; an emulator takes it at its address.
            endpoint = urlsplit(self.settings.endpoint_url)
            url = urlunsplit(urlsplit(url)._replace(scheme=endpoint.scheme, netloc=endpoint.netloc))
        return url

    async def presigned_get_url(self, key: str, expires_in_s: int) -> str:
        """A V4 signed GET of `key`, signed here (no request to GCS); ranges go by a
        Range header, which the URL leaves unsigned."""
        return self._signed_url("fetch URLs", "GET", key, expires_in_s, {})

    # -- uploads by URL: part objects PUT by the caller, composed here -------------

    @property
    def min_part_size(self) -> int:
        return MIN_SIGNED_PART_SIZE

    async def start_multipart(self, key: str) -> str:
        """An upload id of part objects to be PUT (GCS keeps no upload until the first)."""
        self._signer("upload URLs")
        return uuid.uuid4().hex

    async def presigned_part_url(
        self, key: str, upload_id: str, number: int, expires_in_s: int, md5: str
    ) -> str:
        part = _part_key(key, upload_id, f"{number:05d}")
        return await self.presigned_put_url(part, expires_in_s, md5)

    async def presigned_put_url(self, key: str, expires_in_s: int, md5: str) -> str:
        """A V4 signed PUT (XML API) of `key` that signs its Content-MD5, which GCS
        checks the bytes against."""
        headers = {"Content-MD5": content_md5(md5)}
        return self._signed_url("upload URLs", "PUT", key, expires_in_s, headers)

    @property
    def signed_put_headers(self) -> dict[str, str]:
        return {}

    async def uploaded_parts(self, key: str, upload_id: str) -> list[StoredPart]:
        """The part objects PUT so far, by number (none: nothing PUT, or aborted)."""
        parts = []
        async for item in self._listed(_part_key(key, upload_id, "")):
            name = item["name"].rsplit("/", 1)[-1]
            if name.isdigit():  # not an intermediate of an earlier compose
                parts.append(StoredPart(int(name), int(item["size"]), item["name"]))
        return sorted(parts, key=lambda p: p.number)

    async def complete_multipart(self, key: str, upload_id: str, parts: list[StoredPart]) -> None:
        await self.compose_parts(key, upload_id, [p.etag for p in parts])

    async def head(self, key: str) -> StoredPart:
        found = await self.call(
            key,
            partial(self._storage.download_metadata, self.bucket, key, timeout=self._timeout),
        )
        return StoredPart(0, int(found["size"]), str(found.get("md5Hash", "")))

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                await self.call(key, partial(self._storage.delete, self.bucket, key))
            except RemoteResourceNotFoundError:
                continue

    async def _listed(self, prefix: str) -> AsyncIterator[dict[str, Any]]:
        """Every object under `prefix`, part objects too, in GCS's order (by name)."""
        params = {"prefix": prefix}
        while True:
            page = await self.call(
                prefix, partial(self._storage.list_objects, self.bucket, params=dict(params))
            )
            for item in page.get("items", []):
                yield item
            token = page.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = token

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        async for item in self._listed(prefix):
            if STAGING not in item["name"]:
                yield StoredObject(item["name"], int(item["size"]), _epoch_s(item["updated"]))

    async def incomplete_uploads(self, prefix: str) -> AsyncIterator[IncompleteUpload]:
        """Uploads whose part objects are still there: one per (key, upload id), listed
        at its first part (parts sort after their key and by upload id)."""
        seen: set[tuple[str, str]] = set()
        found: list[IncompleteUpload] = []
        async for item in self._listed(prefix):
            key, marker, rest = item["name"].partition(STAGING)
            if not marker:
                continue
            upload_id = rest.split("/", 1)[0]
            created = _epoch_s(item["timeCreated"])
            if (key, upload_id) not in seen:
                seen.add((key, upload_id))
                found.append(IncompleteUpload(key, upload_id, created))
        for upload in sorted(found, key=lambda u: (u.key, u.upload_id)):
            yield upload

    async def abort_upload(self, upload: IncompleteUpload) -> None:
        parts = _part_key(upload.key, upload.upload_id, "")
        await self.delete([item["name"] async for item in self._listed(parts)])

    async def compose(self, key: str, sources: Sequence[str]) -> None:
        await self.call(
            key,
            partial(
                self._storage.compose,
                self.bucket,
                key,
                list(sources),
                content_type=OCTET_STREAM,
                timeout=self._timeout,
            ),
        )

    async def compose_parts(self, key: str, upload_id: str, sources: Sequence[str]) -> None:
        """`key` made of an upload's part objects, in order, which are then deleted:
        past 32 parts, composed 32 at a time into intermediates, and those again."""
        level = 0
        while len(sources) > MAX_COMPOSE:
            level += 1
            groups = [sources[i : i + MAX_COMPOSE] for i in range(0, len(sources), MAX_COMPOSE)]
            names = [_part_key(key, upload_id, f"c{level}-{i:05d}") for i in range(len(groups))]
            await asyncio.gather(*(self.compose(n, g) for n, g in zip(names, groups, strict=True)))
            sources = names
        await self.compose(key, sources)
        await self.abort_upload(IncompleteUpload(key, upload_id, 0.0))


class GcsUpload(PartedUpload[GcsStore]):
    """One PUT when the object fits one part, else part objects composed into it."""

    def __init__(self, store: GcsStore, key: str) -> None:
        super().__init__(store, key, store.settings.part_size, store.settings.concurrency)

    async def _put_part(self, upload_id: str, number: int, part: bytes) -> str:
        name = _part_key(self.key, upload_id, f"{number:05d}")
        await self.store.put(name, part)
        return name

    async def _finish(self, upload_id: str, tags: list[tuple[int, str]]) -> None:
        await self.store.compose_parts(self.key, upload_id, [name for _, name in tags])

    async def _drop(self, upload_id: str) -> None:
        await self.store.abort_upload(IncompleteUpload(self.key, upload_id, 0.0))
