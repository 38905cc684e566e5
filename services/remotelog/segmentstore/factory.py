"""The RemoteStorageManager over a configured backend, for the store and its in-process readers."""

from __future__ import annotations

from pathlib import Path

from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import InvalidArgumentError, RemoteLogError
from remotelog.segmentstore.backend import ObjectStore
from remotelog.segmentstore.config import StorageSettings
from remotelog.segmentstore.filesystem import FileSystemStore
from remotelog.segmentstore.key_providers import (
    AWS_KMS,
    LOCAL,
    AwsKms,
    KeyProvider,
    LocalKeyRing,
    UnwrappedKeys,
)
from remotelog.segmentstore.layout import validate_key_prefix
from remotelog.segmentstore.s3 import S3Settings, S3Store
from remotelog.segmentstore.store import SegmentStore, StoreOptions
from remotelog.segmentstore.transformed import TransformOptions

# Each cloud backend's setting that names its bucket (container), as a URL's scheme.
_BUCKETS = {
    "s3": ("storage.s3.bucket.name", "s3"),
    "gcs": ("storage.gcs.bucket.name", "gs"),
    "azure": ("storage.azure.container.name", "azure"),
}


def _bucket(config: StorageSettings) -> str:
    return {
        "s3": config.s3_bucket_name,
        "gcs": config.gcs_bucket_name,
        "azure": config.azure_container_name,
    }.get(config.storage_backend, "")


def require_bucket(config: StorageSettings) -> None:
    """INVALID_ARGUMENT naming the bucket's setting of a cloud backend without one."""
    if config.storage_backend in _BUCKETS and not _bucket(config):
        key, _ = _BUCKETS[config.storage_backend]
        backend = config.storage_backend
        raise InvalidArgumentError(key, f"is required with storage.backend={backend}")


def storage_location(config: StorageSettings) -> str:
    """Where the objects under the key prefix are, for reports: s3://bucket/prefix."""
    if config.storage_backend in _BUCKETS:
        _, scheme = _BUCKETS[config.storage_backend]
        return f"{scheme}://{_bucket(config)}/{config.key_prefix}"
    return f"{Path(config.storage_root).expanduser()}/{config.key_prefix}"


async def open_backend(config: StorageSettings, backoff: ExponentialBackoff) -> ObjectStore:
    if config.storage_backend == "filesystem":
        return FileSystemStore(
            Path(config.storage_root).expanduser(),
            io_threads=config.fs_io_threads,
            bytes_per_sync=config.fs_bytes_per_sync,
        )
    if config.storage_backend == "gcs":
        from remotelog.segmentstore.gcs import GcsSettings, GcsStore

        return await GcsStore.open(
            GcsSettings(
                bucket=config.gcs_bucket_name,
                endpoint_url=config.gcs_endpoint_url or None,
                credentials_path=str(Path(config.gcs_credentials_path).expanduser())
                if config.gcs_credentials_path
                else "",
                credentials_json=config.gcs_credentials_json,
                part_size=config.gcs_upload_part_size,
                concurrency=config.gcs_upload_concurrency,
                backoff=backoff,
            )
        )
    if config.storage_backend == "azure":
        from remotelog.segmentstore.azure import AzureSettings, AzureStore

        return await AzureStore.open(
            AzureSettings(
                container=config.azure_container_name,
                account_name=config.azure_account_name,
                endpoint_url=config.azure_endpoint_url,
                connection_string=config.azure_connection_string,
                account_key=config.azure_account_key,
                sas_token=config.azure_sas_token,
                block_size=config.azure_upload_block_size,
                concurrency=config.azure_upload_concurrency,
                backoff=backoff,
            )
        )
    return await S3Store.open(
        S3Settings(
            bucket=config.s3_bucket_name,
            region=config.s3_region,
            endpoint_url=config.s3_endpoint_url or None,
            path_style=config.s3_path_style_access,
            access_key_id=config.aws_access_key_id or None,
            secret_access_key=config.aws_secret_access_key or None,
            part_size=config.s3_multipart_part_size,
            concurrency=config.s3_upload_concurrency,
            backoff=backoff,
            sse=config.s3_sse,
            sse_kms_key_id=config.s3_sse_kms_key_id,
        )
    )


async def open_key_provider(config: StorageSettings) -> KeyProvider | None:
    """The configured key provider (None: none), its active key checked where that
    needs no call."""
    provider = config.encryption_key_provider
    if not provider:
        return None
    if not config.encryption_key_id:
        raise InvalidArgumentError(
            "encryption.key.id", f"encryption.key.provider={provider} needs its active key id"
        )
    if provider == LOCAL:
        if not config.encryption_key_ring_dir:
            raise InvalidArgumentError(
                "encryption.key.ring.dir", "encryption.key.provider=local needs its directory"
            )
        ring = Path(config.encryption_key_ring_dir).expanduser()
        try:
            return LocalKeyRing(ring, config.encryption_key_id)
        except RemoteLogError as exc:
            raise InvalidArgumentError("encryption.key.id", exc.message) from None
    assert provider == AWS_KMS
    import aioboto3
    from aiobotocore.config import AioConfig

    timeout_s = config.encryption_kms_timeout_ms / 1000
    session = aioboto3.Session(
        aws_access_key_id=config.aws_access_key_id or None,
        aws_secret_access_key=config.aws_secret_access_key or None,
        region_name=config.s3_region,
    )
    client_cm = session.client(
        "kms",
        endpoint_url=config.encryption_kms_endpoint_url or None,
        config=AioConfig(
            connect_timeout=timeout_s, read_timeout=timeout_s, retries={"total_max_attempts": 2}
        ),
    )
    return AwsKms(client_cm, await client_cm.__aenter__(), config.encryption_key_id)


def transform_options(config: StorageSettings, provider: KeyProvider | None) -> TransformOptions:
    keys = None
    if provider is not None:
        keys = UnwrappedKeys(
            provider,
            config.encryption_key_cache_entries,
            config.encryption_key_cache_ttl_ms / 1000,
        )
    return TransformOptions(
        chunk_size=config.chunk_size,
        compression_level=config.compression_zstd_level if config.compression_enabled else None,
        compression_heuristic=config.compression_heuristic,
        encrypt=provider is not None,
        keys=keys,
        threads=config.transform_threads,
    )


async def open_segment_store(
    config: StorageSettings,
    backoff: ExponentialBackoff,
    custom_metadata_max_bytes: int = 128,
    *,
    fetch_chunk_size: int | None = None,
    data_keys_over_tls: bool = False,
) -> SegmentStore:
    """The RemoteStorageManager over the configured backend (for the service or a direct reader)."""
    validate_key_prefix(config.key_prefix)
    require_bucket(config)
    provider = await open_key_provider(config)
    backend = await open_backend(config, backoff)
    return SegmentStore(
        backend,
        StoreOptions(
            key_prefix=config.key_prefix,
            fetch_chunk_size=fetch_chunk_size or config.fetch_chunk_size,
            custom_metadata_max_bytes=custom_metadata_max_bytes,
            # Presigned URLs last whole seconds; a part of one is rounded up.
            fetch_url_expiry_s=-(-config.s3_fetch_url_expiry_ms // 1000),
            local_fetch_urls=config.fs_fetch_urls,
            read_ahead_chunks=config.fetch_read_ahead_chunks,
            read_ahead_chunk_bytes=config.fetch_read_ahead_chunk_bytes,
            read_ahead_max_bytes=config.fetch_read_ahead_max_bytes,
            transforms=transform_options(config, provider),
            data_keys_over_tls=data_keys_over_tls,
        ),
    )
