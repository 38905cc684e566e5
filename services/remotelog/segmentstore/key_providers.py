"""Key-encryption keys that wrap each segment's data key: a local key ring, or AWS KMS.

A provider makes a fresh data key for each segment (wrapped under its active key),
unwraps a manifest's data key by the key id the manifest names, and re-wraps one
under another key (rotation: the segment's bytes never change). Unwrapped keys are
kept for a while, within a bound, so a segment read again costs no KMS call.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from remotelog.core.errors import RemoteStorageError, RetriableRemoteStorageError
from remotelog.segmentstore.layout import WrappedDataKey
from remotelog.transforms.chunks import DATA_KEY_BYTES, NONCE_BYTES, DataKey

LOCAL = "local"
AWS_KMS = "aws-kms"
_KEY_FILE_SUFFIX = ".key"
_LOCAL_AAD = b"remotelog-data-key:"
# What KMS binds into every data key it wraps for remotelog: a wrapped key taken to
# another application's Decrypt call does not open.
_RETRIABLE_KMS_CODES = frozenset(
    {"ThrottlingException", "KMSInternalException", "DependencyTimeoutException"}
)
_ENCRYPTION_CONTEXT = {"application": "remotelog", "purpose": "segment-data-key"}


class KeyProvider(Protocol):
    name: str

    async def new_data_key(self) -> DataKey: ...

    async def unwrap(self, wrapped: WrappedDataKey) -> bytes: ...

    async def rewrap(self, wrapped: WrappedDataKey, key_id: str) -> WrappedDataKey: ...

    @property
    def active_key_id(self) -> str: ...

    async def close(self) -> None: ...


class KeyNotFoundError(RemoteStorageError):
    """The key-encryption key a manifest names is not the provider's (or not readable)."""


class LocalKeyRing:
    """Keys in files `<key id>.key` of a directory, each 32 random bytes in base64. The
    active one wraps new data keys (AES-256-GCM, the key id bound as associated data);
    the others still unwrap what they wrapped. Files are read at each use, so a key
    added to the ring is found without a restart."""

    name = LOCAL

    def __init__(self, directory: Path, active_key_id: str) -> None:
        self.directory = directory
        self._active = active_key_id
        self._key(active_key_id)  # a ring without its active key is refused at start-up

    @property
    def active_key_id(self) -> str:
        return self._active

    def _key(self, key_id: str) -> bytes:
        if not key_id or "/" in key_id or key_id.startswith("."):
            raise KeyNotFoundError(f"key id {key_id!r} is not a key file's name")
        path = self.directory / f"{key_id}{_KEY_FILE_SUFFIX}"
        try:
            key = base64.b64decode(path.read_text().strip(), validate=True)
        except FileNotFoundError:
            raise KeyNotFoundError(
                f"key {key_id} is not in the local key ring {self.directory}"
            ) from None
        except (OSError, ValueError, binascii.Error) as exc:
            raise KeyNotFoundError(
                f"key {key_id} of the local key ring is unreadable: {exc}"
            ) from None
        if len(key) != DATA_KEY_BYTES:
            raise KeyNotFoundError(
                f"key {key_id} of the local key ring has {len(key)} bytes, not {DATA_KEY_BYTES}"
            )
        return key

    def _wrap(self, key_id: str, plaintext: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        aad = _LOCAL_AAD + key_id.encode()
        return nonce + AESGCM(self._key(key_id)).encrypt(nonce, plaintext, aad)

    async def new_data_key(self) -> DataKey:
        plaintext = os.urandom(DATA_KEY_BYTES)
        return DataKey(plaintext, LOCAL, self._active, self._wrap(self._active, plaintext))

    async def unwrap(self, wrapped: WrappedDataKey) -> bytes:
        key = self._key(wrapped.key_id)
        blob = wrapped.wrapped
        try:
            return AESGCM(key).decrypt(
                blob[:NONCE_BYTES], blob[NONCE_BYTES:], _LOCAL_AAD + wrapped.key_id.encode()
            )
        except (InvalidTag, ValueError):
            raise KeyNotFoundError(
                f"key {wrapped.key_id} of the local key ring does not unwrap this data key "
                "(the key file changed, or the manifest was altered)"
            ) from None

    async def rewrap(self, wrapped: WrappedDataKey, key_id: str) -> WrappedDataKey:
        plaintext = await self.unwrap(wrapped)
        return WrappedDataKey(LOCAL, key_id, self._wrap(key_id, plaintext))

    async def close(self) -> None:
        return None


def new_key_file(directory: Path, key_id: str) -> Path:
    """A new random key of the local key ring (`remotelog keys new`), readable by its
    owner only; an existing key is never overwritten."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key_id}{_KEY_FILE_SUFFIX}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(base64.b64encode(os.urandom(DATA_KEY_BYTES)).decode() + "\n")
    return path


class AwsKms:
    """Data keys from AWS KMS: GenerateDataKey under the active key, Decrypt by the key
    a manifest names, ReEncrypt for rotation. A KMS that does not answer within
    `timeout_s` is a retriable error: the copy fails within its deadline and Kafka
    copies again."""

    name = AWS_KMS

    def __init__(self, client_cm: Any, client: Any, active_key_id: str) -> None:
        self._client_cm, self._client = client_cm, client
        self._active = active_key_id

    @property
    def active_key_id(self) -> str:
        return self._active

    async def _call(self, key_id: str, operation: str, **arguments: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer: dict[str, Any] = await getattr(self._client, operation)(
                EncryptionContext=_ENCRYPTION_CONTEXT, **arguments
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in (
                "ThrottlingException",
                "KMSInternalException",
                "DependencyTimeoutException",
            ):
                raise RetriableRemoteStorageError(f"KMS key {key_id}: {code}") from None
            raise KeyNotFoundError(f"KMS key {key_id}: {code}: {exc}") from None
        except (TimeoutError, BotoCoreError, OSError) as exc:
            raise RetriableRemoteStorageError(
                f"KMS key {key_id}: no answer: {type(exc).__name__}"
            ) from None
        return answer

    async def new_data_key(self) -> DataKey:
        answer = await self._call(
            self._active, "generate_data_key", KeyId=self._active, KeySpec="AES_256"
        )
        return DataKey(answer["Plaintext"], AWS_KMS, answer["KeyId"], answer["CiphertextBlob"])

    async def unwrap(self, wrapped: WrappedDataKey) -> bytes:
        answer = await self._call(
            wrapped.key_id, "decrypt", KeyId=wrapped.key_id, CiphertextBlob=wrapped.wrapped
        )
        plaintext: bytes = answer["Plaintext"]
        return plaintext

    async def rewrap(self, wrapped: WrappedDataKey, key_id: str) -> WrappedDataKey:
        from botocore.exceptions import ClientError

        try:
            answer = await self._client.re_encrypt(
                CiphertextBlob=wrapped.wrapped,
                SourceKeyId=wrapped.key_id,
                SourceEncryptionContext=_ENCRYPTION_CONTEXT,
                DestinationKeyId=key_id,
                DestinationEncryptionContext=_ENCRYPTION_CONTEXT,
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise KeyNotFoundError(f"KMS key {wrapped.key_id} -> {key_id}: {code}") from None
        return WrappedDataKey(AWS_KMS, answer["KeyId"], answer["CiphertextBlob"])

    async def close(self) -> None:
        await self._client_cm.__aexit__(None, None, None)


class UnwrappedKeys:
    """Data keys unwrapped lately, at most `entries` of them for `ttl_s` each: a segment
    read again needs no KMS call, and a key revoked in the KMS stops opening new reads
    within `ttl_s`."""

    def __init__(self, provider: KeyProvider, entries: int, ttl_s: float) -> None:
        self.provider = provider
        self._entries, self._ttl_s = entries, ttl_s
        self._keys: OrderedDict[bytes, tuple[float, bytes]] = OrderedDict()
        self._unwrapping: dict[bytes, asyncio.Future[bytes]] = {}

    async def new_data_key(self) -> DataKey:
        """A fresh data key under the provider's active key, kept unwrapped: Kafka reads
        a segment it has just copied (for its followers and consumers) at once."""
        key = await self.provider.new_data_key()
        self._keep(key.wrapped, key.plaintext)
        return key

    async def plaintext(self, wrapped: WrappedDataKey) -> bytes:
        if wrapped.key_provider != self.provider.name:
            raise KeyNotFoundError(
                f"key {wrapped.key_id} is of key provider {wrapped.key_provider}; this store "
                f"has {self.provider.name}"
            )
        now = time.monotonic()
        found = self._keys.get(wrapped.wrapped)
        if found is not None and found[0] > now:
            self._keys.move_to_end(wrapped.wrapped)
            return found[1]
        # Reads of one segment arriving together (its indexes and its log) share one
        # call to the provider.
        pending = self._unwrapping.get(wrapped.wrapped)
        if pending is None:
            pending = asyncio.ensure_future(self._unwrap(wrapped))
            self._unwrapping[wrapped.wrapped] = pending
            pending.add_done_callback(lambda _: self._unwrapping.pop(wrapped.wrapped, None))
        plaintext: bytes = await asyncio.shield(pending)
        return plaintext

    async def _unwrap(self, wrapped: WrappedDataKey) -> bytes:
        plaintext = await self.provider.unwrap(wrapped)
        if len(plaintext) != DATA_KEY_BYTES:
            raise KeyNotFoundError(
                f"key {wrapped.key_id} unwrapped a key of {len(plaintext)} bytes"
            )
        self._keep(wrapped.wrapped, plaintext)
        return plaintext

    def _keep(self, wrapped: bytes, plaintext: bytes) -> None:
        self._keys[wrapped] = (time.monotonic() + self._ttl_s, plaintext)
        while len(self._keys) > self._entries:
            self._keys.popitem(last=False)
