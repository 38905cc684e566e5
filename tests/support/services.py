"""Starting the services in tests: configs from properties, the service, a client."""

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from support.s3 import s3_client
from support.servers import AZURITE_ACCOUNT, Azurite, GcsEmulator, S3Server
from support.serving import serve_in_background

from remotelog.client import ClientOptions, MetadataClient, SegmentStoreClient
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.config import load_config
from remotelog.core.model import TopicIdPartition, kafka_uuid_str
from remotelog.core.states import RemoteLogSegmentState
from remotelog.kafka.records import decode_records, iter_batches
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.server import start_metadata_manager
from remotelog.recovery.config import RecoverConfig
from remotelog.remover.config import ScrubConfig
from remotelog.remover.scrub import Scrub, ScrubReport
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.gcs import STAGING as GCS_STAGING
from remotelog.segmentstore.server import start_segment_store

# A small metadata topic keeps the broker's work (and the tests) light.
PARTITIONS = 5
# Clients of the services under test: patient, but retrying quickly.
CLIENT_OPTIONS = ClientOptions(
    timeout_s=20, backoff=ExponentialBackoff(initial_ms=20, max_ms=200, jitter=0.2)
)


def new_bucket(s3_endpoint: str) -> str:
    """A fresh bucket on the test S3 server: each stack's objects are its own."""
    name = f"remotelog-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return name


def new_partition(topic: str = "orders", partition: int = 0) -> TopicIdPartition:
    """A partition of a topic no earlier test used (its topic id is new)."""
    return TopicIdPartition(uuid.uuid4(), topic, partition)


def load_properties(config_class, path: Path, properties: dict[str, str]):
    """Write `properties` as a .properties file at `path` and load a service config from it."""
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    config, _ = load_config(config_class, path, {})
    return config


def service_account_key() -> str:
    """A GCP service account's JSON key, with a fresh RSA key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "remotelog-test",
            "private_key_id": "test",
            "private_key": pem,
            "client_email": "store@remotelog-test.iam.gserviceaccount.com",
            "token_uri": "http://127.0.0.1:1/token",
        }
    )


# The cloud backends with an emulator, and the setting that names their bucket.
CLOUDS = {"gcs": "storage.gcs.bucket.name", "azure": "storage.azure.container.name"}


class CloudEmulators:
    """GCS's emulator and Azurite, each started the first time a test asks for it (one
    per worker): buckets and containers of their own for each test."""

    def __init__(self) -> None:
        self._gcs: GcsEmulator | None = None
        self._azurite: Azurite | None = None
        # A service account's key of our own: GCS stores sign URLs with it (the
        # emulator checks no signature and asks for no token).
        self.gcs_key = service_account_key()

    @property
    def gcs(self) -> GcsEmulator:
        if self._gcs is None:
            self._gcs = GcsEmulator()
        return self._gcs

    @property
    def azurite(self) -> Azurite:
        if self._azurite is None:
            self._azurite = Azurite()
        return self._azurite

    def place(self, backend: str, via: S3Server | None = None) -> tuple[str, dict[str, str]]:
        """A new bucket (container) on `backend`'s emulator; its name and the store's
        settings for it, reaching it through `via` (a link in front of it) if given."""
        name = f"remotelog-{uuid.uuid4().hex[:12]}"
        if backend == "gcs":
            self.gcs.new_bucket(name)
            return name, {
                "storage.gcs.bucket.name": name,
                "storage.gcs.endpoint.url": via.endpoint if via else self.gcs.endpoint,
                "storage.gcs.credentials.json": self.gcs_key,
                "storage.gcs.upload.part.size": str(5 * 1024 * 1024),
            }
        assert backend == "azure", backend
        self.azurite.new_container(name)
        endpoint = f"{via.endpoint}/{AZURITE_ACCOUNT}" if via else None
        return name, {
            "storage.azure.container.name": name,
            "storage.azure.connection.string": self.azurite.connection_string_of(endpoint),
            "storage.azure.upload.block.size": str(5 * 1024 * 1024),
        }

    def link(self, backend: str, **link: float) -> S3Server:
        """Object storage's link (and its faults) in front of `backend`'s emulator."""
        emulator = self.gcs if backend == "gcs" else self.azurite
        return S3Server(upstream=f"http://127.0.0.1:{emulator.port}", **link)

    def objects(self, backend: str, name: str, prefix: str = "") -> dict[str, int]:
        emulator = self.gcs if backend == "gcs" else self.azurite
        return emulator.objects(name, prefix)

    def stop(self) -> None:
        for emulator in (self._gcs, self._azurite):
            if emulator is not None:
                emulator.stop()


def cloud_config(
    backend: str, tmp: Path, emulators: CloudEmulators, via: S3Server | None = None, **extra: str
):
    """The store's config on a new bucket of a GCS or Azure emulator (through `via`)."""
    _, properties = emulators.place(backend, via)
    return store_config(backend, tmp, "", "", **{**properties, **extra})


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

    def __init__(self, backend, service, client, config, endpoint, emulators=None):
        self.backend = backend
        self.service = service
        self.client = client
        self.config = config
        self.endpoint = endpoint
        self.emulators = emulators

    def objects(self, prefix: str = "") -> dict[str, int]:
        if self.backend == "filesystem":
            return files_under(Path(self.config.storage_root), prefix)
        if self.backend == "gcs":
            return self.emulators.objects("gcs", self.config.gcs_bucket_name, prefix)
        if self.backend == "azure":
            return self.emulators.objects("azure", self.config.azure_container_name, prefix)
        listing = s3_client(self.endpoint).list_objects_v2(
            Bucket=self.config.s3_bucket_name, Prefix=prefix
        )
        return {o["Key"]: o["Size"] for o in listing.get("Contents", [])}

    async def stop(self, grace_s: float = 1):
        await self.client.close()
        await self.service.stop(grace_s)

    def incomplete_uploads(self) -> int:
        return len(self.incomplete_upload_keys())

    def incomplete_upload_keys(self) -> list[str]:
        """The key each incomplete upload is for (a temp file's, without its suffixes)."""
        if self.backend == "filesystem":
            root = Path(self.config.storage_root)
            temps = [key for key in files_under(root) if key.endswith(".tmp")]
            return [key.rsplit(".", 2)[0] for key in temps]
        if self.backend == "gcs":
            parts = self.emulators.objects("gcs", self.config.gcs_bucket_name)
            return sorted({key.split(GCS_STAGING)[0] for key in parts if GCS_STAGING in key})
        if self.backend == "azure":
            return self.emulators.azurite.incomplete_uploads(self.config.azure_container_name)
        uploads = s3_client(self.endpoint).list_multipart_uploads(Bucket=self.config.s3_bucket_name)
        return [upload["Key"] for upload in uploads.get("Uploads", [])]


def files_under(root: Path, prefix: str = "") -> dict[str, int]:
    """The files under `root` whose paths (relative, with /) start with `prefix`, with
    their sizes. The store may delete some while they are listed: a directory or file
    gone by the time it is read is left out, as a listing a moment later would."""
    found = {}
    for directory, _, names in os.walk(root):  # a directory gone mid-walk is skipped
        for name in names:
            path = Path(directory, name)
            key = path.relative_to(root).as_posix()
            if key.startswith(prefix):
                with contextlib.suppress(FileNotFoundError):
                    found[key] = path.stat().st_size
    return found


async def start_store(
    backend, tmp_path, s3_endpoint, bucket=None, emulators=None, **extra
) -> StoreRunning:
    """The segment store on `backend` (S3: on `bucket`, a fresh one if None; GCS and
    Azure: on the bucket `extra` names, else a new one of `emulators`), with a client."""
    if backend in CLOUDS and CLOUDS[backend] not in extra:
        config = cloud_config(backend, tmp_path, emulators, **extra)
    elif backend in CLOUDS:
        config = store_config(backend, tmp_path, "", "", **extra)
    else:
        bucket = bucket or new_bucket(s3_endpoint)
        config = store_config(backend, tmp_path, s3_endpoint, bucket, **extra)
    return await start_configured_store(config, s3_endpoint, emulators)


async def start_configured_store(config, s3_endpoint="", emulators=None) -> StoreRunning:
    """The segment store of `config`, with a client."""
    service = await start_segment_store(config)
    client = SegmentStoreClient(f"127.0.0.1:{service.port}", options=CLIENT_OPTIONS)
    return StoreRunning(config.storage_backend, service, client, config, s3_endpoint, emulators)


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


def service_properties(store_port: int, metadata_port: int, **extra: str) -> dict[str, str]:
    """What a service beside the store and the metadata manager is given to reach them."""
    return {
        "listen.address": "127.0.0.1:0",
        "segment.store.address": f"127.0.0.1:{store_port}",
        "metadata.manager.address": f"127.0.0.1:{metadata_port}",
        **extra,
    }


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
    so `stop()` takes everything down in order. The store and the metadata
    manager can be stopped and started again on the same bucket, root and topic.
    """

    tmp: Path
    bootstrap: str
    s3_endpoint: str
    backend: str = "filesystem"
    bucket: str = ""
    store: object = None
    metadata: object = None
    running: list = field(default_factory=list)
    short_circuit_socket: str = ""
    # How the services reach Kafka, over `bootstrap` (which the test's own clients use):
    # e.g. a secured listener of the same broker.
    kafka_settings: dict[str, str] = field(default_factory=dict)
    # Where the store and the manager listen: fixed for a broker told before they start.
    store_listen: str = "127.0.0.1:0"
    metadata_listen: str = "127.0.0.1:0"
    # The store's and the manager's own settings over the defaults below, kept across
    # restarts.
    store_settings: dict[str, str] = field(default_factory=dict)
    metadata_settings: dict[str, str] = field(default_factory=dict)
    # GCS's and Azure's emulators, for those backends; the bucket's settings on one.
    emulators: CloudEmulators | None = None
    cloud_settings: dict[str, str] = field(default_factory=dict)

    async def start(self):
        if self.backend in CLOUDS:
            assert self.emulators is not None, "a GCS or Azure stack needs the emulators"
            self.bucket, self.cloud_settings = self.emulators.place(self.backend)
        else:
            self.bucket = new_bucket(self.s3_endpoint)
        # The store's short circuit, for services that take it (a short path: unix sockets).
        self.short_circuit_socket = f"{tempfile.mkdtemp(prefix='rl-')}/store.sock"
        await self.start_store()
        await self.start_metadata()

    async def start_store(self, **extra: str):
        Path(self.short_circuit_socket).parent.mkdir(exist_ok=True)
        self.store = await start_store(
            self.backend,
            self.tmp,
            self.s3_endpoint,
            self.bucket,
            self.emulators,
            **{
                **self.cloud_settings,
                "listen.address": self.store_listen,
                "short.circuit.socket.path": self.short_circuit_socket,
                # Fetch URLs for services that take them (S3 only).
                "storage.s3.fetch.url.expiry.ms": "600000",
                **self.store_settings,
                **extra,
            },
        )

    async def stop_store(self, grace_s: float = 1):
        store, self.store = self.store, None
        await store.stop(grace_s)

    async def start_metadata(self):
        listen = {"listen.address": self.metadata_listen}
        # The store a recovery's segments are checked against.
        store = self.store_listen if self.store is None else f"127.0.0.1:{self.store.service.port}"
        config = metadata_config(
            self.tmp,
            self.bootstrap,
            **listen,
            **{"segment.store.address": store},
            **self.kafka_settings,
            **self.metadata_settings,
        )
        self.metadata = await start_metadata(config)

    async def stop_metadata(self):
        metadata, self.metadata = self.metadata, None
        await metadata.stop()

    def config_file(self, service: str) -> Path:
        """The properties file `service` (segment-store, metadata-manager) was started with."""
        return self.tmp / (
            f"{self.backend}.properties" if service == "segment-store" else "metadata.properties"
        )

    async def serve_apart(self, service: str):
        """`service` (segment-store, metadata-manager) as a process of its own, on the same
        address and settings, for a test that signals it; the test kills it and starts the
        in-process one again."""
        config = self.config_file(service)
        if service == "segment-store":
            await self.stop_store()
        else:
            await self.stop_metadata()
        log = self.tmp / f"{service}-apart.log"
        return await asyncio.to_thread(serve_in_background, service, config, log)

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
            **self.cloud_settings,
        }

    def scrub_config(self, **extra: str) -> ScrubConfig:
        """`remotelog scrub`'s settings for this stack's store and metadata manager."""
        return self.command_config(ScrubConfig, "scrub", **extra)

    def recover_config(self, **extra: str) -> RecoverConfig:
        """`remotelog recover`'s settings for this stack's store and metadata manager."""
        return self.command_config(RecoverConfig, "recover", **extra)

    def command_config(self, config_class, command: str, **extra: str):
        """An operator command's settings, in `<command>.properties`: this stack's store
        and metadata manager, with short deadlines."""
        properties = {
            **self.storage_properties(),
            "metadata.manager.address": f"127.0.0.1:{self.metadata.service.port}",
            "remote.partition.remover.rpc.timeout.ms": "5000",
            "remote.log.manager.task.retry.backoff.ms": "20",
            "remote.log.manager.task.retry.backoff.max.ms": "100",
            **extra,
        }
        return load_properties(config_class, self.tmp / f"{command}.properties", properties)

    async def scrub(self) -> ScrubReport:
        """What `remotelog scrub --older-than 0s` finds in the store (deleting nothing)."""
        config = self.scrub_config()
        backend = await open_backend(config, config.backoff())
        try:
            return await Scrub(backend, self.metadata.client, grace_s=0).run()
        finally:
            await backend.close()

    def service_properties(self, **extra: str) -> dict[str, str]:
        return service_properties(self.store.service.port, self.metadata.service.port, **extra)

    def started(self, service):
        self.running.append(service)
        return service

    async def stop_service(self, service):
        self.running.remove(service)
        await service.stop()

    async def stop(self):
        for service in list(self.running):
            await self.stop_service(service)
        if self.metadata is not None:
            await self.stop_metadata()
        if self.store is not None:
            await self.stop_store()
        shutil.rmtree(Path(self.short_circuit_socket).parent, ignore_errors=True)

    # -- what is in the remote tier -----------------------------------------------

    async def segments(self, tip: TopicIdPartition, states=None) -> list:
        """The partition's segments as the metadata manager lists them (in `states`)."""
        listed = [s async for s in self.metadata.client.list_remote_log_segments(tip)]
        return [s for s in listed if states is None or s.state in states]

    async def remote_records(self, tip: TopicIdPartition) -> dict[int, tuple[bytes, bytes]]:
        """Every record of every COPY_SEGMENT_FINISHED segment, read back from the store."""
        out: dict[int, tuple[bytes, bytes]] = {}
        finished = {RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
        for segment in await self.segments(tip, finished):
            data = b"".join([c async for c in self.store.client.fetch_log_segment(segment, 0)])
            for header in iter_batches(data):
                for record in decode_records(data, header):
                    out[record.offset] = (record.key, record.value)
        return out

    def objects_of(self, tip: TopicIdPartition) -> dict[str, int]:
        """The store's objects under the partition's prefix, with their sizes."""
        return self.store.objects(f"{tip.topic}-{kafka_uuid_str(tip.topic_id)}/{tip.partition}/")


@contextlib.asynccontextmanager
async def started(stack: BackendStack):
    """`stack` started, and stopped with everything it started however the test ends."""
    await stack.start()
    try:
        yield stack
    finally:
        await stack.stop()


def loading_state(manager, broker) -> str:
    """Where a manager's replay stands against the broker's watermarks, and the broker's log."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "diagnosis"})
    try:
        rows = []
        for metadata_part, assigned in manager.store.assigned.items():
            watermarks = consumer.get_watermark_offsets(
                TopicPartition(manager.topic_name, metadata_part), timeout=5
            )
            rows.append(
                f"{manager.topic_name}-{metadata_part}: applied up to "
                f"{assigned.state.next_offset}, caught up {assigned.caught_up}, "
                f"broker watermarks {watermarks}"
            )
    finally:
        consumer.close()
    tail = broker.log_path.read_text(errors="replace").splitlines()[-30:]
    return "\n".join([*rows, "the broker's log ends:", *tail])
