"""Tiering throughput on each cloud backend: the store's copy against the cloud's own
library doing the same transfers, in one run.

For each of S3 (moto), GCS (gcp-storage-emulator) and Azure (Azurite): a segment is
copied through the segment store service (`remotelog serve segment-store`, its own
process, over gRPC) and, alternately, uploaded by the cloud's library from this
process with nothing of remotelog between, the same part size and concurrency:
aioboto3's multipart upload; gcloud-aio-storage putting the parts as objects four at
a time and composing them, as the gcs backend does; azure-storage-blob's own
parallel block upload. The figure is the median of per-round ratios (common.
interleaved_pair: bare time / service time; above 1 the service is faster).

The emulators run in memory on loopback: no cloud's latency, throttling or
bandwidth, and their own speed (single-threaded Python for GCS, Node for Azure) sets
the pace of both sides. Read the ratios as remotelog's overhead over each library,
never as cloud throughput.

On S3 alone, obstore's multipart put against aioboto3's upload, both bare
(s3_obstore_vs_aioboto3: aioboto3's time over obstore's, above 1 obstore is faster):
the figure issue 78 asks for before one library could serve every cloud.

Target (issue 78): <backend>_copy_vs_raw >= 0.8.
Run: .venv/bin/python bench/object_stores.py [segment MiB, default 64]
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import aiohttp
from azure.storage.blob.aio import BlobServiceClient
from common import (
    ROOT,
    Report,
    RoundPlan,
    cpu_of,
    interleaved_pair,
    own_cpu,
    s3_server_command,
    start,
)
from common import serve as serve_service
from gcloud.aio.storage import Storage

# The same part size and concurrency as the segment store's bench, S3's bare side its own.
from segment_store import CONCURRENCY, MIB, PART, in_turn, s3_rounds, service_rounds

from remotelog.client import ClientOptions, LogSegmentData, SegmentStoreClient
from remotelog.dev.broker import free_port

PLAN = RoundPlan(warmup_rounds=1, min_rounds=7, max_rounds=21)
AZURITE = ROOT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

# (upload, tidy): one timed bare upload of the segment, and removal of all but the last.
Bare = tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]


def azure_connection_string(host: str) -> str:
    """Azurite's account at `host` (http://127.0.0.1:<port>: Azurite's, or a link's)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={host}/{AZURITE_ACCOUNT};"
    )


def azurite_host(connection_string: str) -> str:
    """The host azure_connection_string was given."""
    endpoint = connection_string.split("BlobEndpoint=", 1)[1].split(";", 1)[0]
    return endpoint.removesuffix(f"/{AZURITE_ACCOUNT}")


def start_server(backend: str) -> tuple[subprocess.Popen[str], str]:
    """The backend's server on a free loopback port; the process and its endpoint."""
    if backend == "s3":
        process, line = start(s3_server_command(), "PORT")
        return process, f"http://127.0.0.1:{line.split()[1]}"
    port = free_port()
    if backend == "gcs":
        binary = Path(sys.executable).with_name("gcp-storage-emulator")
        command = [str(binary), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"]
        process, _ = start(command, "All services started")
        return process, f"http://127.0.0.1:{port}"
    command = [str(AZURITE), "--inMemoryPersistence", "--loose", "--skipApiVersionCheck"]
    process, _ = start([*command, "--blobHost", "127.0.0.1", "--blobPort", str(port)], "listen")
    return process, azure_connection_string(f"http://127.0.0.1:{port}")


def new_gcs_bucket(endpoint: str, bucket: str) -> None:
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).read()


def store_properties(backend: str, endpoint: str, bucket: str) -> dict[str, str]:
    properties = {"listen.address": "127.0.0.1:0", "storage.backend": backend}
    if backend == "s3":
        return properties | {
            "storage.s3.bucket.name": bucket,
            "storage.s3.endpoint.url": endpoint,
            "storage.s3.path.style.access.enabled": "true",
            "storage.aws.access.key.id": "test",
            "storage.aws.secret.access.key": "test",
            "storage.s3.multipart.upload.part.size": str(PART),
            "storage.s3.upload.concurrency": str(CONCURRENCY),
        }
    if backend == "gcs":
        return properties | {
            "storage.gcs.bucket.name": bucket,
            "storage.gcs.endpoint.url": endpoint,
            "storage.gcs.upload.part.size": str(PART),
            "storage.gcs.upload.concurrency": str(CONCURRENCY),
        }
    return properties | {
        "storage.azure.container.name": bucket,
        "storage.azure.connection.string": endpoint,
        "storage.azure.upload.block.size": str(PART),
        "storage.azure.upload.concurrency": str(CONCURRENCY),
    }


@asynccontextmanager
async def gcs_rounds(endpoint: str, bucket: str, log: Path) -> AsyncIterator[Bare]:
    """Parts put as objects CONCURRENCY at a time, composed, the parts deleted."""
    data = log.read_bytes()
    async with aiohttp.ClientSession() as session:
        storage = Storage(session=session, api_root=endpoint)  # type: ignore[arg-type]
        keys: list[str] = []
        slots = asyncio.Semaphore(CONCURRENCY)

        async def put(name: str, body: bytes) -> None:
            async with slots:
                await storage.upload(bucket, name, body, force_resumable_upload=False)

        async def upload() -> None:
            key = f"bare/{uuid.uuid4().hex}.log"
            parts = [f"{key}.part{i:05d}" for i in range(0, len(data), PART)]
            await asyncio.gather(
                *(put(name, data[i * PART : (i + 1) * PART]) for i, name in enumerate(parts))
            )
            await storage.compose(bucket, key, parts, content_type="application/octet-stream")
            await asyncio.gather(*(storage.delete(bucket, name) for name in parts))
            keys.append(key)

        async def tidy() -> None:
            while len(keys) > 1:
                await storage.delete(bucket, keys.pop(0))

        yield upload, tidy


@asynccontextmanager
async def azure_rounds(connection_string: str, container: str, log: Path) -> AsyncIterator[Bare]:
    """The SDK's own block upload: blocks of PART, CONCURRENCY at a time."""
    data = log.read_bytes()
    service = BlobServiceClient.from_connection_string(
        connection_string, max_block_size=PART, max_single_put_size=PART
    )
    async with service:
        blobs = service.get_container_client(container)
        await blobs.create_container()
        keys: list[str] = []

        async def upload() -> None:
            key = f"bare/{uuid.uuid4().hex}.log"
            await blobs.upload_blob(key, data, max_concurrency=CONCURRENCY)
            keys.append(key)

        async def tidy() -> None:
            while len(keys) > 1:
                await blobs.delete_blob(keys.pop(0))

        yield upload, tidy


@asynccontextmanager
async def obstore_rounds(endpoint: str, bucket: str, log: Path) -> AsyncIterator[Bare]:
    """obstore's multipart put of the segment (Rust's object_store): the one library for
    every cloud the store could have been built on, at the same part size and concurrency."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        bucket,
        endpoint=endpoint,
        access_key_id="test",
        secret_access_key="test",
        region="us-east-1",
        client_options={"allow_http": True},
        virtual_hosted_style_request=False,
    )
    keys: list[str] = []

    async def upload() -> None:
        key = f"obstore/{uuid.uuid4().hex}.log"
        await obstore.put_async(
            store, key, log, use_multipart=True, chunk_size=PART, max_concurrency=CONCURRENCY
        )
        keys.append(key)

    async def tidy() -> None:
        while len(keys) > 1:
            await obstore.delete_async(store, keys.pop(0))

    yield upload, tidy


async def obstore_vs_aioboto3(report: Report, endpoint: str, bucket: str, log: Path) -> None:
    """The S3 path's two libraries side by side, nothing of remotelog between: the
    issue's condition for one library on every cloud (at least as fast as aioboto3)."""
    async with (
        bare_rounds("s3", endpoint, f"{bucket}-boto", log) as (boto_upload, boto_tidy),
        obstore_rounds(endpoint, f"{bucket}-boto", log) as (obstore_upload, obstore_tidy),
    ):
        rounds = await interleaved_pair(
            obstore_upload, boto_upload, tidy=in_turn(obstore_tidy, boto_tidy), plan=PLAN
        )
    report.ratio_rounds("s3_obstore_vs_aioboto3", rounds.ratios["ratio"], 1.0)


@asynccontextmanager
async def bare_rounds(backend: str, endpoint: str, bucket: str, log: Path) -> AsyncIterator[Bare]:
    if backend == "s3":
        async with s3_rounds(endpoint, bucket, log, log.stat().st_size) as (up, _, tidy):
            yield up, tidy
    elif backend == "gcs":
        new_gcs_bucket(endpoint, bucket)
        async with gcs_rounds(endpoint, bucket, log) as rounds:
            yield rounds
    else:
        async with azure_rounds(endpoint, bucket, log) as rounds:
            yield rounds


async def main() -> None:
    size = int(sys.argv[1]) * MIB if len(sys.argv) > 1 else 64 * MIB
    work = Path(tempfile.mkdtemp(prefix="remotelog-bench-"))
    log = work / "00000000000000000000.log"
    log.write_bytes(os.urandom(size))
    files = LogSegmentData(log, b"\0" * 8, b"\0" * 12, b"", b"0\n1\n0 0\n")
    report = Report("object_stores")
    processes: list[subprocess.Popen[str]] = []
    try:
        for backend in ("s3", "gcs", "azure"):
            server, endpoint = start_server(backend)
            processes.append(server)
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            if backend == "s3":
                await obstore_vs_aioboto3(report, endpoint, bucket, log)
            async with AsyncExitStack() as stack:
                bare_upload, bare_tidy = await stack.enter_async_context(
                    bare_rounds(backend, endpoint, bucket, log)
                )
                properties = store_properties(backend, endpoint, bucket)
                store, port = serve_service(
                    "segment-store", work / f"{backend}.properties", properties
                )
                processes.append(store)
                client = SegmentStoreClient(
                    f"127.0.0.1:{port}", options=ClientOptions(timeout_s=300)
                )
                stack.push_async_callback(client.close)
                copy, _, tidy = service_rounds(client, files, size)
                watch = {"segment-store": cpu_of(store.pid), "client": own_cpu}
                watch[backend] = cpu_of(server.pid)
                rounds = await interleaved_pair(
                    copy, bare_upload, watch=watch, tidy=in_turn(tidy, bare_tidy), plan=PLAN
                )
                report.ratio_rounds(f"{backend}_copy_vs_raw", rounds.ratios["ratio"], 0.8)
                mb = size / 1e6
                report.info(
                    f"{backend}_copy_mb_per_s",
                    store=round(mb / statistics.median(rounds.times["measured"]), 1),
                    raw=round(mb / statistics.median(rounds.times["baseline"]), 1),
                    segment_mib=size // MIB,
                )
                print(f"{backend} copy: store " + rounds.cpu_line("measured", "GB", size / 1e9))
                print(f"{backend} copy: raw " + rounds.cpu_line("baseline", "GB", size / 1e9))
    finally:
        for process in processes:
            process.kill()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
