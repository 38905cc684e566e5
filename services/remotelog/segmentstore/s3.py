"""S3 backend (aioboto3): AWS, MinIO and moto alike.

Uploads above one part are multipart, at most `concurrency` parts in flight, so
memory stays below part size x (concurrency + 1) whatever the segment size; a
failed or abandoned upload is aborted so no incomplete parts linger. Fetches are
ranged GETs; a connection dropped mid-body resumes from the byte it reached.
Throttling, 5xx, timeouts and dropped connections are retried with exponential
backoff and jitter until the caller's deadline (remotelog.core.deadline);
botocore's own retries are off so there is one retry policy, bounded by it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import aioboto3
import aiohttp
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError
from botocore.handlers import convert_body_to_file_like_object

from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import (
    InvalidArgumentError,
    RemoteResourceNotFoundError,
)
from remotelog.segmentstore.backend import IncompleteUpload, StoredObject, StoredPart
from remotelog.segmentstore.object_calls import (
    CallPolicy,
    Calls,
    StreamBody,
    content_md5,
    resuming_read,
    storage_error,
)
from remotelog.segmentstore.parted_upload import PartedUpload
from remotelog.segmentstore.s3_endpoints import resolve_endpoints_per_bucket

T = TypeVar("T")

# S3 error codes and HTTP statuses that a later attempt may get past.
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound", "NoSuchUpload"})
# S3's smallest part but the last of a multipart upload.
MIN_PART_SIZE = 5 * 1024 * 1024
_TRANSPORT_ERRORS = (
    BotoCoreError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    ConnectionError,
    asyncio.IncompleteReadError,
)


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ClientError):
        status = _status(exc)
        return _code(exc) in _TRANSIENT_CODES or status >= 500 or status == 429
    return isinstance(exc, _TRANSPORT_ERRORS)


def _translate(exc: BaseException, what: str) -> Exception:
    not_found = isinstance(exc, ClientError) and (
        _code(exc) in _NOT_FOUND_CODES or _status(exc) == 404
    )
    return storage_error(exc, what, not_found=not_found, transient=is_transient(exc))


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    region: str
    endpoint_url: str | None
    path_style: bool
    access_key_id: str | None
    secret_access_key: str | None
    part_size: int
    concurrency: int
    backoff: ExponentialBackoff
    # Server-side encryption of every PUT and upload: "", "AES256" or "aws:kms".
    sse: str = ""
    sse_kms_key_id: str = ""
    # Retries without a caller deadline stop after this long.
    default_retry_s: float = 60.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0


class S3Store:
    def __init__(self, settings: S3Settings, client: Any, exit_stack: Any) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        self._client = client
        self._client_cm = exit_stack
        self._calls = Calls(
            CallPolicy(
                f"s3://{settings.bucket}",
                settings.backoff,
                is_transient,
                _translate,
                (ClientError, *_TRANSPORT_ERRORS),
                settings.default_retry_s,
            )
        )
        self.sse = sse_params(settings.sse, settings.sse_kms_key_id)

    @classmethod
    async def open(cls, settings: S3Settings) -> S3Store:
        session = aioboto3.Session(
            aws_access_key_id=settings.access_key_id or None,
            aws_secret_access_key=settings.secret_access_key or None,
            region_name=settings.region,
        )
        config = AioConfig(
            s3={"addressing_style": "path" if settings.path_style else "auto"},
            # SSE-KMS takes SigV4 only, and presigned URLs sign their headers with it.
            signature_version="s3v4",
            retries={"total_max_attempts": 1},
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            max_pool_connections=max(10, settings.concurrency * 4),
        )
        client_cm = session.client("s3", endpoint_url=settings.endpoint_url or None, config=config)
        client = await client_cm.__aenter__()
        # botocore wraps a bytes body in a BytesIO; then aiohttp unshares its
        # buffer (a copy), the checksum and the payload signature each read it
        # back in copied pieces, and aiohttp sends it in copied 64 KiB reads:
        # four copies of every uploaded byte, a third of the store's CPU on a
        # copy. Kept as bytes, the checksum and the signature hash it in place
        # and aiohttp writes it as it is; a retry resends the same bytes.
        for operation in ("PutObject", "UploadPart"):
            client.meta.events.unregister(
                f"before-parameter-build.s3.{operation}", convert_body_to_file_like_object
            )
        resolve_endpoints_per_bucket(client)
        return cls(settings, client, client_cm)

    async def close(self) -> None:
        """Close the client; calls after this fail instead of reopening it.

        aiobotocore opens an HTTP session on demand, so a call made after close
        (a cancelled handler's abort, a retry that outlived the server's grace)
        would open one that nobody closes.
        """
        if not self._calls.closed:
            self._calls.closed = True
            await self._client_cm.__aexit__(None, None, None)

    async def call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        """Run one S3 call with the retry policy; failures come out translated."""
        return await self._calls(what, operation)

    def open_upload(self, key: str) -> S3Upload:
        return S3Upload(self, key)

    async def put(self, key: str, data: bytes) -> None:
        await self.call(
            key, lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data, **self.sse)
        )

    async def get(self, key: str) -> bytes:
        async def attempt() -> bytes:
            response = await self._client.get_object(Bucket=self.bucket, Key=key)
            async with response["Body"] as body:
                return bytes(await body.read())

        return await self.call(key, attempt)

    async def _get_range(self, key: str, byte_range: str) -> Any:
        """A ranged GET; None when the range starts past the object's end."""
        try:
            return await self._client.get_object(Bucket=self.bucket, Key=key, Range=byte_range)
        except ClientError as exc:
            if _code(exc) == "InvalidRange":
                return None
            raise

    def read(
        self, key: str, start: int, end: int | None, chunk_size: int
    ) -> AsyncGenerator[bytes, None]:
        return resuming_read(self._calls, key, start, end, chunk_size, partial(self._range, key))

    async def _range(self, key: str, start: int, end: int | None) -> StreamBody | None:
        byte_range = f"bytes={start}-{'' if end is None else end}"
        response = await self._get_range(key, byte_range)
        if response is None:
            return None
        return StreamBody(int(response["ContentLength"]), response["Body"])

    async def presigned_get_url(self, key: str, expires_in_s: int) -> str:
        """Signed here, with no request to S3: the URL carries the signature."""
        return await self._presign("get_object", expires_in_s, Key=key)

    async def _presign(self, operation: str, expires_in_s: int, **params: Any) -> str:
        url = await self._client.generate_presigned_url(
            operation, Params={"Bucket": self.bucket, **params}, ExpiresIn=expires_in_s
        )
        return str(url)

    @property
    def min_part_size(self) -> int:
        return MIN_PART_SIZE

    async def start_multipart(self, key: str) -> str:
        created = await self.call(
            key,
            partial(self._client.create_multipart_upload, Bucket=self.bucket, Key=key, **self.sse),
        )
        return str(created["UploadId"])

    async def presigned_part_url(
        self, key: str, upload_id: str, number: int, expires_in_s: int, md5: str
    ) -> str:
        # A part takes its upload's encryption: it sends no SSE header.
        return await self._presign(
            "upload_part",
            expires_in_s,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            ContentMD5=content_md5(md5),
        )

    async def presigned_put_url(self, key: str, expires_in_s: int, md5: str) -> str:
        return await self._presign(
            "put_object", expires_in_s, Key=key, ContentMD5=content_md5(md5), **self.sse
        )

    @property
    def signed_put_headers(self) -> dict[str, str]:
        """Headers a presigned PUT of a whole object signs, beside Content-MD5: its caller
        sends them as they are."""
        return {SSE_HEADERS[name]: value for name, value in self.sse.items()}

    async def uploaded_parts(self, key: str, upload_id: str) -> list[StoredPart]:
        parts: list[StoredPart] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "UploadId": upload_id}
        while True:
            page = await self.call(key, partial(self._client.list_parts, **kwargs))
            parts += [
                StoredPart(int(p["PartNumber"]), int(p["Size"]), p["ETag"])
                for p in page.get("Parts", [])
            ]
            if not page.get("IsTruncated"):
                return parts
            kwargs["PartNumberMarker"] = page["NextPartNumberMarker"]

    async def complete_multipart(self, key: str, upload_id: str, parts: list[StoredPart]) -> None:
        listed = [{"PartNumber": p.number, "ETag": p.etag} for p in parts]
        await self.call(
            key,
            partial(
                self._client.complete_multipart_upload,
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": listed},
            ),
        )

    async def head(self, key: str) -> StoredPart:
        found = await self.call(key, partial(self._client.head_object, Bucket=self.bucket, Key=key))
        return StoredPart(0, int(found["ContentLength"]), found["ETag"])

    async def delete(self, keys: list[str]) -> None:
        for key in keys:
            await self.call(key, partial(self._client.delete_object, Bucket=self.bucket, Key=key))

    async def _pages(self, operation: Any, prefix: str, **marker: str) -> AsyncIterator[Any]:
        """Every page of a paginated listing; `marker` names the response's continuation keys."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            page = await self.call(prefix, partial(operation, **kwargs))
            yield page
            if not page.get("IsTruncated"):
                return
            kwargs.update({request: page[response] for request, response in marker.items()})

    async def list(self, prefix: str) -> AsyncIterator[StoredObject]:
        pages = self._pages(
            self._client.list_objects_v2, prefix, ContinuationToken="NextContinuationToken"
        )
        async for page in pages:
            for item in page.get("Contents", []):
                yield StoredObject(item["Key"], int(item["Size"]), item["LastModified"].timestamp())

    async def incomplete_uploads(self, prefix: str) -> AsyncIterator[IncompleteUpload]:
        pages = self._pages(
            self._client.list_multipart_uploads,
            prefix,
            KeyMarker="NextKeyMarker",
            UploadIdMarker="NextUploadIdMarker",
        )
        async for page in pages:
            for upload in page.get("Uploads", []):
                yield IncompleteUpload(
                    upload["Key"], upload["UploadId"], upload["Initiated"].timestamp()
                )

    async def abort_upload(self, upload: IncompleteUpload) -> None:
        abort = partial(
            self._client.abort_multipart_upload,
            Bucket=self.bucket,
            Key=upload.key,
            UploadId=upload.upload_id,
        )
        try:
            await self.call(upload.key, abort)
        except RemoteResourceNotFoundError:
            return  # already completed or aborted


# boto3's parameters of server-side encryption, and the headers they are.
SSE_HEADERS = {
    "ServerSideEncryption": "x-amz-server-side-encryption",
    "SSEKMSKeyId": "x-amz-server-side-encryption-aws-kms-key-id",
}


def sse_params(sse: str, kms_key_id: str) -> dict[str, str]:
    """boto3's parameters for `storage.s3.sse` and its KMS key."""
    if kms_key_id and sse != "aws:kms":
        raise InvalidArgumentError("storage.s3.sse.kms.key.id", "needs storage.s3.sse=aws:kms")
    params = {"ServerSideEncryption": sse} if sse else {}
    if kms_key_id:
        params["SSEKMSKeyId"] = kms_key_id
    return params


class S3Upload(PartedUpload[S3Store]):
    """Single PUT when the object fits one part, else a multipart upload."""

    def __init__(self, store: S3Store, key: str) -> None:
        super().__init__(store, key, store.settings.part_size, store.settings.concurrency)

    async def _begin(self) -> str:
        store = self.store
        created = await store.call(
            self.key,
            lambda: store._client.create_multipart_upload(
                Bucket=store.bucket, Key=self.key, **store.sse
            ),
        )
        return str(created["UploadId"])

    async def _put_part(self, upload_id: str, number: int, part: bytes) -> str:
        store = self.store
        response = await store.call(
            f"{self.key} part {number}",
            lambda: store._client.upload_part(
                Bucket=store.bucket, Key=self.key, UploadId=upload_id, PartNumber=number, Body=part
            ),
        )
        return str(response["ETag"])

    async def _finish(self, upload_id: str, tags: list[tuple[int, str]]) -> None:
        store = self.store
        parts = [{"PartNumber": number, "ETag": etag} for number, etag in tags]
        await store.call(
            self.key,
            lambda: store._client.complete_multipart_upload(
                Bucket=store.bucket,
                Key=self.key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
            ),
        )

    async def _drop(self, upload_id: str) -> None:
        store = self.store
        await store.call(
            self.key,
            lambda: store._client.abort_multipart_upload(
                Bucket=store.bucket, Key=self.key, UploadId=upload_id
            ),
        )
