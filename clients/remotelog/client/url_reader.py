"""Reading a segment log from the URL the segment store signs for it (GetLogSegmentUrl).

With the S3 backend and `storage.s3.fetch.url.expiry.ms` set, the store hands
out a presigned GET of a segment's log object and the client reads the bytes
from S3 itself: one hop, S3 to the caller, as from a broker's own
RemoteStorageManager, where FetchLogSegment takes two (S3 to the store, the
store to the caller) and the store spends as much CPU on each byte as the
caller does. A URL is kept per segment until shortly before it expires, so a
read asks the store nothing.

A read the URL cannot finish is not an error: it goes on through
FetchLogSegment from the byte it reached, and the store's own retries against
S3 apply. Two answers are final: 404 (the object is gone: SEGMENT_NOT_FOUND,
as the store would say) and the caller's deadline.

A filesystem store on this host may hand out file:// URLs instead
(`storage.filesystem.fetch.urls.enabled`): the bytes come from the page cache.
A file that is not there is no answer (the caller may be on another host), so
the RPC says whether the segment is gone.
"""

from __future__ import annotations

import asyncio
import os
import re
import urllib.parse
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from remotelog.core.errors import (
    DeadlineExceededError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

if TYPE_CHECKING:
    import aiohttp

READ_CHUNK_BYTES = 4 * 1024 * 1024
# An object store that cannot be reached must not take the whole deadline:
# the read goes on through the RPC after this long.
CONNECT_TIMEOUT_S = 3.0
_REFUSED = 403
# 400s about the URL's signature rather than the request: GCS answers an expired V4
# URL 400 ExpiredToken, where S3 and Azure answer 403.
_REFUSED_400_CODES = frozenset(
    {
        "ExpiredToken",
        "AuthenticationFailed",
        "AuthenticationRequired",
        "InvalidAuthenticationInfo",
        "AuthorizationQueryParametersError",
    }
)
_ERROR_CODE = re.compile(rb"<Code>([A-Za-z0-9]+)</Code>")
_NOT_FOUND = 404
_RANGE_NOT_SATISFIABLE = 416
_PARTIAL_CONTENT = 206


class UrlReadUnavailable(Exception):
    """This read cannot go on by URL; FetchLogSegment can (from `position`)."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        # 403 (GCS: 400 ExpiredToken): the URL expired or its signature is not accepted.
        self.refused = refused


class UrlReader:
    """Ranged GETs of fetch URLs over one pooled HTTP session, opened on first use."""

    def __init__(self, max_connections: int = 64) -> None:
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        # Imported on first use: aiohttp takes a quarter of a second to import, paid
        # by every process that imports the clients (each Spark Python worker),
        # most of which never read by URL.
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections),
                auto_decompress=False,
            )
        return self._session

    async def read(
        self, url: str, start: int, last: int, *, what: str, timeout_s: float
    ) -> AsyncGenerator[bytes, None]:
        """Bytes start..last (inclusive) of the object at `url`, in chunks.

        Raises RemoteResourceNotFoundError (404), DeadlineExceededError, or
        UrlReadUnavailable for anything the RPC may still get past.
        """
        if url.startswith("file:"):
            async for piece in _read_file(url, start, last, what):
                yield piece
            return
        import aiohttp

        want = last + 1 - start
        failure: Exception | None = None
        try:
            async with self._http().get(
                url,
                headers={"Range": f"bytes={start}-{last}"},
                timeout=aiohttp.ClientTimeout(
                    total=timeout_s, sock_connect=min(timeout_s, CONNECT_TIMEOUT_S)
                ),
            ) as response:
                code = ""
                if response.status == 400:  # its meaning is in the error's code
                    found = _ERROR_CODE.search(await response.content.read(4096))
                    code = found.group(1).decode() if found else ""
                _check(response.status, code, response.content_length, want, start, what)
                content = response.content
                got = 0
                while got < want:
                    chunk = await content.readexactly(min(READ_CHUNK_BYTES, want - got))
                    got += len(chunk)
                    yield chunk
        # First: a connect timeout is a ClientError and a TimeoutError both.
        except (aiohttp.ClientError, asyncio.IncompleteReadError, ConnectionError) as exc:
            failure = UrlReadUnavailable(f"{what}: {type(exc).__name__}: {unsigned(str(exc))}")
        except TimeoutError:
            failure = DeadlineExceededError(f"{what}: no answer from its URL within the deadline")
        if failure is not None:
            # Raised outside the handler: the library's exception, which may print the
            # URL whole (a connect timeout's does), is neither its cause nor its context.
            raise failure

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _read_file(url: str, start: int, last: int, what: str) -> AsyncGenerator[bytes, None]:
    path = urllib.parse.unquote(urllib.parse.urlparse(url).path)
    try:
        file = await asyncio.to_thread(open, path, "rb", buffering=0)
    except OSError as exc:
        raise UrlReadUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    try:
        position = start
        while position <= last:
            want = min(READ_CHUNK_BYTES, last + 1 - position)
            chunk = await asyncio.to_thread(os.pread, file.fileno(), want, position)
            if not chunk:
                raise RemoteStorageError(f"{what}: the stored log ends at byte {position}")
            position += len(chunk)
            yield chunk
    finally:
        file.close()


_SIGNED_QUERY = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s?'\"<>]*)\?[^\s'\"<>]*", re.IGNORECASE)


def unsigned(text: str) -> str:
    """`text` with the query of every URL in it cut off: a presigned URL's signature is a
    credential for its object, never to be logged."""
    return _SIGNED_QUERY.sub(r"\1?…", text)


def _check(status: int, code: str, length: int | None, want: int, start: int, what: str) -> None:
    if status == _NOT_FOUND:
        raise RemoteResourceNotFoundError(f"{what}: not found (its log object is gone)")
    if status == _RANGE_NOT_SATISFIABLE:
        raise RemoteStorageError(f"{what}: the stored log ends before byte {start}")
    if status == _REFUSED or (status == 400 and code in _REFUSED_400_CODES):
        said = f"{status} {code}".strip()
        raise UrlReadUnavailable(f"{what}: its URL was refused ({said})", refused=True)
    if status != _PARTIAL_CONTENT:
        # A 200 would be the whole object: a server that ignored the range.
        raise UrlReadUnavailable(f"{what}: HTTP {status} to a ranged GET")
    if length is not None and length < want:
        raise RemoteStorageError(
            f"{what}: the stored log ends at byte {start + length}, before {start + want}"
        )
