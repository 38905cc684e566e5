"""Configuration of the segment store service (RemoteStorageManager).

Storage keys follow Aiven's tiered-storage plugin, the RSM most Kafka
operators run, so their existing settings carry over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from remotelog.core.config import setting
from remotelog.core.settings import (
    HTTP_URL,
    HTTP_URL_FORM,
    MIB,
    CustomMetadataSettings,
    MetadataClientSettings,
    RedisSettings,
    RetrySettings,
    SegmentStoreClientSettings,
    ServerSettings,
    listen_address_setting,
)
from remotelog.transforms.chunks import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE


def readable_file(value: str) -> str | None:
    """A credentials file that is there and readable (empty: none is set)."""
    if not value:
        return None
    path = Path(value).expanduser()
    try:
        with path.open("rb"):
            return None
    except OSError as exc:
        return f"cannot read {value}: {exc.strerror or exc}"


def service_account_json(value: str) -> str | None:
    if not value:
        return None
    try:
        key = json.loads(value)
    except ValueError:
        return "is not JSON (a service account's key)"
    if not isinstance(key, dict) or "type" not in key:
        return "is not a service account's key (no type)"
    return None


def _absolute_paths(value: str) -> str | None:
    relative = [p.strip() for p in value.split(",") if p.strip() and not p.strip().startswith("/")]
    return f"paths must be absolute: {', '.join(relative)}" if relative else None


@dataclass(frozen=True)
class StorageSettings:
    """Where segment objects live; the remote fetch service reads with these too when direct."""

    storage_backend: str = setting(
        "storage.backend",
        "filesystem",
        "Where objects live: a directory, S3 (or an S3-compatible store), Google Cloud "
        "Storage or Azure Blob Storage",
        choices=("filesystem", "s3", "gcs", "azure"),
    )
    storage_root: str = setting(
        "storage.root",
        "~/.local/share/remotelog/segments",
        "Directory of the filesystem backend (~ is the home directory of the service's user)",
    )
    key_prefix: str = setting("key.prefix", "", "Prefix of every object key")
    s3_bucket_name: str = setting("storage.s3.bucket.name", "", "S3 bucket of the s3 backend")
    s3_region: str = setting("storage.s3.region", "us-east-1", "S3 region")
    s3_endpoint_url: str = setting(
        "storage.s3.endpoint.url",
        "",
        "S3 endpoint (MinIO, moto); empty = AWS",
        form=HTTP_URL_FORM,
        check=HTTP_URL,
    )
    s3_path_style_access: bool = setting(
        "storage.s3.path.style.access.enabled", False, "Address buckets by path, not host name"
    )
    aws_access_key_id: str = setting("storage.aws.access.key.id", "", "S3 access key id")
    aws_secret_access_key: str = setting(
        "storage.aws.secret.access.key", "", "S3 secret access key", secret=True
    )
    s3_multipart_part_size: int = setting(
        "storage.s3.multipart.upload.part.size",
        25 * MIB,
        "The store's uploads above this size are multipart, in parts of this size (the "
        "Kafka plugin's URL copies plan their parts by its copy.url.part.bytes)",
        min=5 * MIB,
        max=5 * 1024 * MIB,
    )
    s3_sse: str = setting(
        "storage.s3.sse",
        "",
        "Server-side encryption asked of S3 on every PUT and multipart upload, presigned "
        "ones included (signed into them): AES256 (SSE-S3) or aws:kms (SSE-KMS, with "
        "storage.s3.sse.kms.key.id or the account's default key); empty = the bucket's "
        "default encryption",
        choices=("", "AES256", "aws:kms"),
    )
    s3_sse_kms_key_id: str = setting(
        "storage.s3.sse.kms.key.id",
        "",
        "The KMS key (id, ARN or alias) of storage.s3.sse=aws:kms; empty = the account's "
        "default aws/s3 key",
    )
    s3_upload_concurrency: int = setting(
        "storage.s3.upload.concurrency", 4, "Parts of one upload in flight at once", min=1, max=64
    )
    s3_fetch_url_expiry_ms: int = setting(
        "storage.s3.fetch.url.expiry.ms",
        60 * 1000,
        "GetLogSegmentUrl hands out presigned GETs of segment logs valid this long, so "
        "callers (the fetch service, its bulk readers, the Kafka plugin, Spark tasks) read "
        "the bytes from S3 themselves; each grants a read of its object to whoever holds "
        "it, so keep it short: callers ask again as it runs out. 0 = none (callers use "
        "FetchLogSegment)",
        min=0,
        max=7 * 24 * 3600 * 1000,  # SigV4's longest
    )
    gcs_bucket_name: str = setting("storage.gcs.bucket.name", "", "GCS bucket of the gcs backend")
    gcs_endpoint_url: str = setting(
        "storage.gcs.endpoint.url",
        "",
        "GCS endpoint (an emulator's); empty = Google's",
        form=HTTP_URL_FORM,
        check=HTTP_URL,
    )
    gcs_credentials_path: str = setting(
        "storage.gcs.credentials.path",
        "",
        "A service account's JSON key file. Empty, and storage.gcs.credentials.json empty: "
        "Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's, the "
        "metadata server), or none against storage.gcs.endpoint.url",
        check=readable_file,
    )
    gcs_credentials_json: str = setting(
        "storage.gcs.credentials.json",
        "",
        "A service account's JSON key, inline (from a secret)",
        secret=True,
        check=service_account_json,
    )
    gcs_upload_part_size: int = setting(
        "storage.gcs.upload.part.size",
        25 * MIB,
        "The store's uploads above this size go as part objects of this size, composed "
        "into the object",
        min=256 * 1024,
        max=5 * 1024 * MIB,
    )
    gcs_upload_concurrency: int = setting(
        "storage.gcs.upload.concurrency", 4, "Parts of one upload in flight at once", min=1, max=64
    )
    azure_container_name: str = setting(
        "storage.azure.container.name", "", "Blob container of the azure backend"
    )
    azure_account_name: str = setting(
        "storage.azure.account.name",
        "",
        "Storage account (with storage.azure.account.key, storage.azure.sas.token, or "
        "neither: DefaultAzureCredential, such as a managed or workload identity)",
    )
    azure_account_key: str = setting(
        "storage.azure.account.key", "", "The storage account's key", secret=True
    )
    azure_sas_token: str = setting(
        "storage.azure.sas.token",
        "",
        "A SAS token of the container, with read, write, delete and list",
        secret=True,
    )
    azure_connection_string: str = setting(
        "storage.azure.connection.string",
        "",
        "A connection string of the account (it names the account, its key or a SAS, and "
        "its endpoint); instead of the settings above",
        secret=True,
    )
    azure_endpoint_url: str = setting(
        "storage.azure.endpoint.url",
        "",
        "The account's blob endpoint (Azurite's: http://127.0.0.1:10000/devstoreaccount1); "
        "empty = https://<account>.blob.core.windows.net",
        form=HTTP_URL_FORM,
        check=HTTP_URL,
    )
    azure_upload_block_size: int = setting(
        "storage.azure.upload.block.size",
        25 * MIB,
        "The store's uploads above this size go as blocks of this size, committed as a list",
        min=64 * 1024,
        max=4000 * MIB,
    )
    azure_upload_concurrency: int = setting(
        "storage.azure.upload.concurrency",
        4,
        "Blocks of one upload in flight at once",
        min=1,
        max=64,
    )
    fs_fetch_urls: bool = setting(
        "storage.filesystem.fetch.urls.enabled",
        False,
        "GetLogSegmentUrl hands out file:// URLs of segment logs, for callers on this "
        "host that may read the store root (the Kafka plugin beside the store): they "
        "read the bytes from the page cache themselves",
    )
    fs_io_threads: int = setting(
        "storage.filesystem.io.threads", 8, "Threads for the filesystem backend's file calls", min=1
    )
    fs_bytes_per_sync: int = setting(
        "storage.filesystem.bytes.per.sync",
        4 * MIB,
        "An upload starts writing to disk each time this many more bytes arrive, so its "
        "final fsync waits for less (RocksDB's bytes_per_sync; Linux); 0 = all at the fsync",
        min=0,
    )
    fetch_chunk_size: int = setting(
        "fetch.chunk.size", 4 * MIB, "Bytes per streamed fetch message", min=4096, max=16 * MIB
    )
    fetch_read_ahead_chunks: int = setting(
        "fetch.read.ahead.chunks",
        8,
        "S3 backend: a read of a segment's log takes it in chunks, one ranged GET each, and "
        "asks for this many chunks past the one read before they are wanted, so a reader's "
        "next fetch (Kafka's, through FetchLogSegment) finds its bytes in memory. 0 = one "
        "GET per read, to the read's end",
        min=0,
        max=64,
    )
    fetch_read_ahead_chunk_bytes: int = setting(
        "fetch.read.ahead.chunk.bytes",
        MIB,
        "Bytes of a read-ahead chunk: one ranged GET each",
        min=64 * 1024,
        max=64 * MIB,
    )
    fetch_read_ahead_max_bytes: int = setting(
        "fetch.read.ahead.max.bytes",
        64 * MIB,
        "Bytes of read-ahead chunks held or in flight across the process's reads; past it, "
        "no chunk is asked for ahead and the oldest are let go",
        min=64 * 1024,
    )

    chunk_size: int = setting(
        "chunk.size",
        4 * MIB,
        "With compression or encryption on, new segments' logs and indexes are stored as "
        "chunks of this many original bytes, each compressed and encrypted on its own; a "
        "ranged read fetches only its chunks (manifest version 2)",
        min=MIN_CHUNK_SIZE,
        max=MAX_CHUNK_SIZE,
    )
    compression_enabled: bool = setting(
        "compression.enabled",
        False,
        "New segments' chunks are compressed with zstd, each one only where that shrinks it",
    )
    compression_heuristic: bool = setting(
        "compression.heuristic.enabled",
        True,
        "A segment whose first batches Kafka's producers already compressed is not "
        "compressed again (read from the batch attributes)",
    )
    compression_zstd_level: int = setting(
        "compression.zstd.level", 3, "zstd level of compressed chunks", min=1, max=22
    )
    encryption_key_provider: str = setting(
        "encryption.key.provider",
        "",
        "Where the key-encryption keys live: local (a key ring of files, "
        "encryption.key.ring.dir) or aws-kms. New segments are encrypted (AES-256-GCM, a "
        "data key each, wrapped by encryption.key.id); segments encrypted earlier decrypt "
        "with the key their manifest names. Empty = new segments are not encrypted, and "
        "encrypted ones cannot be read",
        choices=("", "local", "aws-kms"),
    )
    encryption_key_id: str = setting(
        "encryption.key.id",
        "",
        "The active key-encryption key: a key file's name (without .key) of the local key "
        "ring, or a KMS key id, ARN or alias",
    )
    encryption_key_ring_dir: str = setting(
        "encryption.key.ring.dir",
        "",
        "Directory of the local key ring: a file <key id>.key per key, 32 random bytes in "
        "base64 (remotelog keys new writes one)",
    )
    encryption_kms_endpoint_url: str = setting(
        "encryption.kms.endpoint.url",
        "",
        "KMS endpoint (moto, a VPC endpoint); empty = AWS's for storage.s3.region",
        form=HTTP_URL_FORM,
        check=HTTP_URL,
    )
    encryption_kms_timeout_ms: int = setting(
        "encryption.kms.timeout.ms",
        5000,
        "A KMS call not answered within this is a retriable error (the copy fails, Kafka "
        "copies again)",
        min=100,
    )
    encryption_key_cache_entries: int = setting(
        "encryption.key.cache.entries",
        10_000,
        "Unwrapped data keys kept, so a segment read again needs no KMS call",
        min=1,
    )
    encryption_key_cache_ttl_ms: int = setting(
        "encryption.key.cache.ttl.ms",
        300_000,
        "How long an unwrapped data key is kept: a key revoked in the KMS opens no new "
        "reads after this",
        min=1000,
    )
    transform_threads: int = setting(
        "transform.threads", 4, "Threads that compress, encrypt and decode chunks", min=1
    )


@dataclass(frozen=True)
class SegmentStoreConfig(ServerSettings, RetrySettings, StorageSettings, CustomMetadataSettings):
    listen_address: str = listen_address_setting("127.0.0.1:7301")
    copy_chunk_max_bytes: int = setting(
        "copy.chunk.max.bytes",
        4 * MIB,
        "Largest data chunk of a CopyLogSegmentData message; larger is INVALID_ARGUMENT",
        min=4096,
        max=15 * MIB,
    )
    copy_paths_allowed: str = setting(
        "copy.paths.allowed",
        "",
        "Directories, comma-separated, whose files CopyLogSegmentFiles may copy: the log "
        "directories of a broker on this host whose plugin sends its segments' paths "
        "(copy.method=path), which this service's user must be able to read. Empty = "
        "CopyLogSegmentFiles is UNIMPLEMENTED",
        check=_absolute_paths,
    )
    s3_copy_urls: bool = setting(
        "storage.s3.copy.urls.enabled",
        True,
        "StartSegmentUpload hands the Kafka plugin (copy.method=url) signed PUTs of a "
        "segment's multipart upload (S3; GCS: part objects; Azure: blocks; the name is "
        "S3's, it serves every cloud), valid for the copy's timeout plus a minute, so the "
        "broker sends the bytes to the bucket itself; each grants a write of its object "
        "to whoever holds it",
    )
    incomplete_uploads_abort_after_ms: int = setting(
        "incomplete.uploads.abort.after.ms",
        3_600_000,
        "An upload of a copy (a temp file, an S3 multipart upload) this old is one no copy "
        "will finish, cut off by a killed store or broker: the store aborts it. Longer than "
        "the plugin's client.copy.timeout.ms (StartSegmentUpload refuses a longer copy "
        "timeout); 0 = never (Kafka's delete of the failed attempt removes it, once "
        "retention reaches that segment)",
        min=0,
        max=24 * 3600 * 1000,  # the longest copy timeout a store takes
    )
    short_circuit_socket_path: str = setting(
        "short.circuit.socket.path",
        "",
        "Unix socket for clients on this host that pass file descriptors instead of bytes "
        "(fetches from the filesystem backend, copies to either); empty = off",
    )


@dataclass(frozen=True)
class TierClientSettings(
    ServerSettings,
    RetrySettings,
    SegmentStoreClientSettings,
    MetadataClientSettings,
    RedisSettings,
    StorageSettings,
):
    """A service that uses the remote tier: the segment store (as its service, or
    straight through `storage.*`), the metadata manager and Redis (fetch, scheduler)."""
