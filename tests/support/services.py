"""Starting the services in tests: configs from properties, the service, a client."""

import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from support.s3 import s3_client

from remotelog.client import ClientOptions, MetadataClient, SegmentStoreClient
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.config import load_config
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.server import start_metadata_manager
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.server import start_segment_store

# A small metadata topic keeps the broker's work (and the tests) light.
PARTITIONS = 5


def load_properties(config_class, path: Path, properties: dict[str, str]):
    """Write `properties` as a .properties file at `path` and load a service config from it."""
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    config, _ = load_config(config_class, path, {})
    return config


def store_config(backend: str, tmp: Path, endpoint: str, bucket: str, **extra: str):
    properties = {
        "listen.address": "127.0.0.1:0",
        "storage.backend": backend,
        "storage.root": str(tmp / "segments"),
        "storage.s3.bucket.name": bucket,
        "storage.s3.endpoint.url": endpoint,
        "storage.s3.path.style.access.enabled": "true",
        "storage.aws.access.key.id": "test",
        "storage.aws.secret.access.key": "test",
        "storage.s3.multipart.upload.part.size": str(5 * 1024 * 1024),
        "fetch.chunk.size": "65536",
        "remote.log.manager.task.retry.backoff.ms": "20",
        "remote.log.manager.task.retry.backoff.max.ms": "200",
        **extra,
    }
    path = tmp / f"{backend}.properties"
    return load_properties(SegmentStoreConfig, path, properties)


class StoreRunning:
    """A started segment store with a client, its config, and a way to list its objects."""

    def __init__(self, backend, service, client, config, endpoint):
        self.backend = backend
        self.service = service
        self.client = client
        self.config = config
        self.endpoint = endpoint

    def objects(self, prefix: str = "") -> dict[str, int]:
        if self.backend == "filesystem":
            root = Path(self.config.storage_root)
            return {
                p.relative_to(root).as_posix(): p.stat().st_size
                for p in root.rglob("*")
                if p.is_file() and p.relative_to(root).as_posix().startswith(prefix)
            }
        listing = s3_client(self.endpoint).list_objects_v2(
            Bucket=self.config.s3_bucket_name, Prefix=prefix
        )
        return {o["Key"]: o["Size"] for o in listing.get("Contents", [])}

    def incomplete_uploads(self) -> int:
        if self.backend == "filesystem":
            root = Path(self.config.storage_root)
            return len(list(root.rglob("*.tmp")))
        uploads = s3_client(self.endpoint).list_multipart_uploads(Bucket=self.config.s3_bucket_name)
        return len(uploads.get("Uploads", []))


async def start_store(backend, tmp_path, s3_endpoint, bucket, **extra):
    config = store_config(backend, tmp_path, s3_endpoint, bucket, **extra)
    service = await start_segment_store(config)
    client = SegmentStoreClient(
        f"127.0.0.1:{service.port}",
        options=ClientOptions(
            timeout_s=20, backoff=ExponentialBackoff(initial_ms=20, max_ms=200, jitter=0.2)
        ),
    )
    return StoreRunning(backend, service, client, config, s3_endpoint)


def metadata_config(
    tmp: Path, bootstrap: str, name: str = "metadata", **extra: str
) -> MetadataManagerConfig:
    properties = {
        "listen.address": "127.0.0.1:0",
        "bootstrap.servers": bootstrap,
        "remote.log.metadata.topic.num.partitions": str(PARTITIONS),
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.metadata.consume.wait.ms": "10000",
        "remote.log.metadata.consumer.fetch.max.wait.ms": "10",
        "remote.log.metadata.initialization.retry.max.timeout.ms": "20000",
        "remote.log.metadata.snapshot.dir": str(tmp / name / "snapshots"),
        **extra,
    }
    path = tmp / f"{name}.properties"
    return load_properties(MetadataManagerConfig, path, properties)


class ServiceRunning:
    """A started service (its core is `app`) with a client of it."""

    def __init__(self, service, client, config=None):
        self.service = service
        self.client = client
        self.config = config

    @property
    def app(self):
        return self.service.app

    async def stop(self):
        await self.client.close()
        await self.service.stop(1.0)


class MetadataRunning(ServiceRunning):
    """A started metadata manager service with a client."""

    @property
    def manager(self):
        return self.service.app


async def start_metadata(config: MetadataManagerConfig) -> MetadataRunning:
    service = await start_metadata_manager(config)
    client = MetadataClient(
        f"127.0.0.1:{service.port}",
        options=ClientOptions(
            timeout_s=20, backoff=ExponentialBackoff(initial_ms=10, max_ms=100, jitter=0.2)
        ),
    )
    return MetadataRunning(service, client, config)


@dataclass
class BackendStack:
    """The real segment store (on a fresh bucket) and metadata manager, plus started services.

    A service under test goes into `running` (anything with an async `stop()`),
    so `stop()` takes everything down in order.
    """

    tmp: Path
    bootstrap: str
    s3_endpoint: str
    backend: str = "filesystem"
    store: object = None
    metadata: object = None
    running: list = field(default_factory=list)
    short_circuit_socket: str = ""

    async def start(self):
        bucket = f"remotelog-{uuid.uuid4().hex[:12]}"
        s3_client(self.s3_endpoint).create_bucket(Bucket=bucket)
        # The store's short circuit, for services that take it (a short path: unix sockets).
        self.short_circuit_socket = f"{tempfile.mkdtemp(prefix='rl-')}/store.sock"
        self.store = await start_store(
            self.backend,
            self.tmp,
            self.s3_endpoint,
            bucket,
            **{
                "short.circuit.socket.path": self.short_circuit_socket,
                # Fetch URLs for services that take them (S3 only).
                "storage.s3.fetch.url.expiry.ms": "600000",
            },
        )
        self.metadata = await start_metadata(metadata_config(self.tmp, self.bootstrap))

    def storage_properties(self) -> dict[str, str]:
        """The `storage.*` keys that reach the store's backend directly."""
        store = self.store.config
        return {
            "storage.backend": store.storage_backend,
            "storage.root": store.storage_root,
            "storage.s3.bucket.name": store.s3_bucket_name,
            "storage.s3.endpoint.url": store.s3_endpoint_url,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": store.aws_access_key_id,
            "storage.aws.secret.access.key": store.aws_secret_access_key,
        }

    def started(self, service):
        self.running.append(service)
        return service

    async def stop_service(self, service):
        self.running.remove(service)
        await service.stop()

    async def stop(self):
        for service in list(self.running):
            await self.stop_service(service)
        await self.metadata.stop()
        await self.store.client.close()
        await self.store.service.stop(1)
        shutil.rmtree(Path(self.short_circuit_socket).parent, ignore_errors=True)
