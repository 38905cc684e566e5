"""Segment store fixtures: moto's S3 server (with faults), and the service on each backend."""

import json
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_asyncio
from support.s3 import s3_client

from remotelog.client import ClientOptions, SegmentStoreClient
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.config import load_config
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.server import start_segment_store


@pytest.fixture(scope="session")
def s3_faults(s3_endpoint) -> Callable[..., None]:
    """s3_faults(mode, count, method=None): the next `count` matching requests fail."""

    def inject(mode: str | None, count: int = 1, method: str | None = None) -> None:
        if mode is None:
            request = urllib.request.Request(f"{s3_endpoint}/__faults__", method="DELETE")
        else:
            body = json.dumps({"mode": mode, "count": count, "method": method}).encode()
            request = urllib.request.Request(f"{s3_endpoint}/__faults__", data=body, method="POST")
        urllib.request.urlopen(request, timeout=5).read()

    return inject


@pytest.fixture
def s3_bucket(s3_endpoint) -> str:
    name = f"remotelog-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return name


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
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    config, _ = load_config(SegmentStoreConfig, path, {})
    return config


class Running:
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


async def start_running(backend, tmp_path, s3_endpoint, bucket, **extra):
    config = store_config(backend, tmp_path, s3_endpoint, bucket, **extra)
    service = await start_segment_store(config)
    client = SegmentStoreClient(
        f"127.0.0.1:{service.port}",
        options=ClientOptions(
            timeout_s=20, backoff=ExponentialBackoff(initial_ms=20, max_ms=200, jitter=0.2)
        ),
    )
    return Running(backend, service, client, config, s3_endpoint)


@pytest_asyncio.fixture(params=["filesystem", "s3"])
async def store(request, tmp_path, s3_endpoint, s3_faults):
    """The service on each backend: every contract test runs against both."""
    bucket = f"remotelog-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    running = await start_running(request.param, tmp_path, s3_endpoint, bucket)
    yield running
    s3_faults(None)
    await running.client.close()
    await running.service.stop(1)
