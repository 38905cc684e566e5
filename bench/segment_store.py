"""Segment store: copy and sequential fetch MB/s through the service vs the bare backend.

Each backend is measured against a bare transfer of the same bytes in the same
run: for filesystem, a file copy (in-kernel, its disk writes started as it
goes and an fsync at the end, as the store does); the gRPC fetch against a bare
grpc.aio stream of the same file in the store's 4 MiB messages from another
process (bare_stream.py: the same work without remotelog), the short circuit's
against a file read (it hands the client the file); for S3, aioboto3 uploading
(same part size, same concurrency) and downloading straight to the same moto
server. Rounds of the service and of the bare transfer
alternate, so both meet the same state of the backend (moto's memory, the
disk's writeback queue) and the same noise of the machine; each figure is the
median of the per-round ratios, printed with their spread, over rounds that go
on until that median is known within +-5% (common.interleaved_pair, `settled`);
copies older than the last are removed between rounds. The service runs in its
own process (`remotelog serve segment-store`), as in production; moto in
another.
Each backend is measured through the gRPC streams and through the store's
short circuit (`short.circuit.socket.path`: descriptors over a unix socket,
for a client on the store's host; S3 fetches take the stream); S3 fetches
also by the URLs the store signs (`storage.s3.fetch.url.expiry.ms`: the
client reads S3 itself, any host).
Targets (issue 4): copy >= 0.8x, fetch >= 0.8x. Reported beside them: bare
loopback TCP between two processes, the ceiling of any network service here, and
the gRPC fetch against a page-cached read (what it was once compared with).
Run: .venv/bin/python bench/segment_store.py [segment MiB, default 64]
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import aioboto3
from aiobotocore.config import AioConfig
from bare_stream import bare_stream
from bare_stream import read as bare_stream_read
from boto3.s3.transfer import TransferConfig
from common import (
    Report,
    RoundPlan,
    Rounds,
    cpu_of,
    interleaved_pair,
    own_cpu,
    s3_server_command,
    start,
)

from remotelog.client import ClientOptions, LogSegmentData, SegmentStoreClient
from remotelog.core.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.process.memory import keep_freed_memory
from remotelog.rpc.serve import serve_command
from remotelog.segmentstore.writeback import start_writeback

MIB = 1024 * 1024
PART = 8 * MIB
BYTES_PER_SYNC = 4 * MIB  # the store's default storage.filesystem.bytes.per.sync
CONCURRENCY = 4

# One timed transfer of the whole segment.
Round = Callable[[], Awaitable[None]]
# (copy, fetch of the last copy, removal of all copies but the last): each copy is of
# a new segment, as the copy scheduler's are, and removing the older ones between
# rounds keeps the state every round meets the same (moto held them all in memory).
Rounds3 = tuple[Round, Round, Round]
# Rounds go on until each median is known within +-5%, or 31; page-cached reads of
# 3-30 ms are repeated to 50 ms a round.
PLAN = RoundPlan(warmup_rounds=1, min_rounds=9, max_rounds=31, min_round_s=0.05)


def in_turn(*calls: Round) -> Round:
    async def run() -> None:
        for call in calls:
            await call()

    return run


def metadata(size: int) -> RemoteLogSegmentMetadata:
    tip = TopicIdPartition(uuid.uuid4(), "bench", 0)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tip, uuid.uuid4()),
        start_offset=0,
        end_offset=1000,
        max_timestamp_ms=0,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=size,
        segment_leader_epochs=((0, 0),),
    )


def service_rounds(client: SegmentStoreClient, files: LogSegmentData, size: int) -> Rounds3:
    """(copy, fetch, tidy) through the service."""
    copied: list[RemoteLogSegmentMetadata] = []

    async def copy() -> None:
        m = metadata(size)
        await client.copy_log_segment_data(m, files)
        copied.append(m)

    async def fetch() -> None:
        n = 0
        async for chunk in client.fetch_log_segment(copied[-1], 0):
            n += len(chunk)
        assert n == size

    async def tidy() -> None:
        while len(copied) > 1:
            await client.delete_log_segment_data(copied.pop(0))

    return copy, fetch, tidy


def filesystem_rounds(log: Path, work: Path, size: int) -> Rounds3:
    """(copy, read, tidy) of plain files in a thread, as the store's pool does them."""
    copies: list[Path] = []

    def copy() -> None:
        # The best a plain copy does with the store's durability: in-kernel, each
        # 4 MiB's disk write started as it is copied, then the fsync. (copyfile and
        # one fsync at the end left the disk idle while copying: the store's early
        # writeback made the short circuit 1.3-1.7x that, by how fast the disk was.)
        target = work / f"bare-{uuid.uuid4().hex}.log"
        with log.open("rb") as source, target.open("wb") as copied:
            position = 0
            while position < size:
                n = os.copy_file_range(source.fileno(), copied.fileno(), BYTES_PER_SYNC)
                start_writeback(copied.fileno(), position, n)
                position += n
            os.fsync(copied.fileno())
        copies.append(target)

    def read() -> None:
        n = 0
        with copies[-1].open("rb") as handle:
            while chunk := handle.read(MIB):
                n += len(chunk)
        assert n == size

    def tidy() -> None:
        while len(copies) > 1:
            copies.pop(0).unlink()

    async def in_thread(fn: Callable[[], None]) -> None:
        await asyncio.to_thread(fn)

    return lambda: in_thread(copy), lambda: in_thread(read), lambda: in_thread(tidy)


@contextlib.asynccontextmanager
async def s3_rounds(endpoint: str, bucket: str, log: Path, size: int) -> AsyncIterator[Rounds3]:
    """(upload, download, tidy) with aioboto3 straight to the server."""
    session = aioboto3.Session(
        aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    config = AioConfig(s3={"addressing_style": "path"}, max_pool_connections=16)
    async with session.client("s3", endpoint_url=endpoint, config=config) as s3:
        await s3.create_bucket(Bucket=bucket)
        transfer = TransferConfig(
            multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=CONCURRENCY
        )
        keys: list[str] = []

        async def upload() -> None:
            key = f"bare/{uuid.uuid4().hex}.log"
            await s3.upload_file(str(log), bucket, key, Config=transfer)
            keys.append(key)

        async def download() -> None:
            response = await s3.get_object(Bucket=bucket, Key=keys[-1])
            n = 0
            async with response["Body"] as body:
                while chunk := await body.content.read(MIB):
                    n += len(chunk)
            assert n == size

        async def tidy() -> None:
            while len(keys) > 1:
                await s3.delete_object(Bucket=bucket, Key=keys.pop(0))

        yield upload, download, tidy


def _send_file(listener: socket.socket, log: Path) -> None:
    """Child process: send `log` to each connection, until stopped."""
    data = log.read_bytes()
    while True:
        connection, _ = listener.accept()
        with connection:
            connection.sendall(data)


@contextlib.contextmanager
def loopback_rounds(log: Path, size: int) -> Iterator[Round]:
    """Moving the segment over loopback TCP between two processes, no framing.

    Any network service's fetch is bounded by this on the machine; it puts the
    filesystem baseline (a page-cache read) in proportion.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    sender = multiprocessing.get_context("fork").Process(target=_send_file, args=(listener, log))
    sender.start()
    port = listener.getsockname()[1]

    def receive() -> None:
        buffer = bytearray(MIB)
        n = 0
        with socket.create_connection(("127.0.0.1", port)) as connection:
            while received := connection.recv_into(buffer):
                n += received
        assert n == size

    async def transfer() -> None:
        await asyncio.to_thread(receive)

    try:
        yield transfer
    finally:
        sender.terminate()
        sender.join()
        listener.close()


def serve(config: Path) -> tuple[subprocess.Popen[str], int]:
    process, line = start(serve_command("segment-store", config), "serving on")
    return process, int(line.rsplit(":", 1)[1])


def store_config(work: Path, backend: str, endpoint: str, bucket: str) -> Path:
    config = work / f"{backend}.properties"
    config.write_text(
        "listen.address=127.0.0.1:0\n"
        f"storage.backend={backend}\nstorage.root={work / 'store'}\n"
        f"storage.s3.bucket.name={bucket}\nstorage.s3.endpoint.url={endpoint}\n"
        "storage.s3.path.style.access.enabled=true\n"
        "storage.aws.access.key.id=test\nstorage.aws.secret.access.key=test\n"
        f"storage.s3.multipart.upload.part.size={PART}\n"
        f"storage.s3.upload.concurrency={CONCURRENCY}\n"
        f"short.circuit.socket.path={short_circuit_socket(work, backend)}\n"
        "storage.s3.fetch.url.expiry.ms=600000\n"
    )
    return config


def short_circuit_socket(work: Path, backend: str) -> Path:
    return work / f"{backend}.sock"


# (backend, transport) -> (copy rounds, fetch rounds): "measured" is the service, with
# the CPU of the store ("segment-store"), this process ("client") and moto ("s3").
Results = dict[tuple[str, str], tuple[Rounds, Rounds]]
# The store's messages of a fetch (its default fetch.chunk.size).
FETCH_CHUNK = 4 * MIB
# The store's ways in: gRPC streams, descriptors over its unix socket (a client
# on the store's host; S3 fetches take the stream), and for S3 fetches the URLs
# it signs (copies take the stream: measured once, as grpc's).
TRANSPORTS = {"filesystem": ("grpc", "short_circuit"), "s3": ("grpc", "short_circuit", "fetch_url")}


async def measure(
    work: Path, endpoint: str, bucket: str, files: LogSegmentData, size: int, moto_pid: int
) -> tuple[Results, dict[str, Rounds], list[subprocess.Popen[str]]]:
    """Every pair of rounds; and, of the filesystem store's gRPC fetch, the pairs against
    loopback TCP between two processes and against a page-cached read ("baseline")."""
    results: Results = {}
    reported: dict[str, Rounds] = {}
    processes: list[subprocess.Popen[str]] = []
    log = Path(str(files.log_segment))
    with bare_stream(FETCH_CHUNK, [log]) as (bare_pid, bare_port):

        async def bare_grpc_fetch() -> None:
            assert await bare_stream_read(bare_port) == size

        async with s3_rounds(endpoint, bucket, log, size) as s3_bare:
            bare = {"filesystem": filesystem_rounds(log, work, size), "s3": s3_bare}
            for backend in ("filesystem", "s3"):
                process, port = serve(store_config(work, backend, endpoint, bucket))
                processes.append(process)
                store, s3 = cpu_of(process.pid), cpu_of(moto_pid)
                watch = {"segment-store": store, "client": own_cpu, "s3": s3}
                for transport in TRANSPORTS[backend]:
                    client = store_client(work, backend, transport, port)
                    try:
                        copy, fetch, tidy = service_rounds(client, files, size)
                        bare_copy, bare_fetch, bare_tidy = bare[backend]
                        if transport == "fetch_url":
                            await copy()  # a segment to read; its copy is grpc's
                            copies = results[backend, "grpc"][0]
                        else:
                            copies = await interleaved_pair(
                                copy,
                                bare_copy,
                                watch=watch,
                                tidy=in_turn(tidy, bare_tidy),
                                plan=PLAN,
                            )
                        if (backend, transport) == ("filesystem", "grpc"):
                            grpc_watch = watch | {"bare": cpu_of(bare_pid)}
                            fetches = await interleaved_pair(
                                fetch, bare_grpc_fetch, watch=grpc_watch, plan=PLAN
                            )
                            with loopback_rounds(log, size) as loopback:
                                reported["loopback"] = await interleaved_pair(
                                    fetch, loopback, plan=PLAN
                                )
                            reported["page cache"] = await interleaved_pair(
                                fetch, bare_fetch, plan=PLAN
                            )
                        else:
                            fetches = await interleaved_pair(
                                fetch, bare_fetch, watch=watch, plan=PLAN
                            )
                    finally:
                        await client.close()
                    results[backend, transport] = (copies, fetches)
    return results, reported, processes


def store_client(work: Path, backend: str, transport: str, port: int) -> SegmentStoreClient:
    socket_path = short_circuit_socket(work, backend)
    return SegmentStoreClient(
        f"127.0.0.1:{port}",
        options=ClientOptions(timeout_s=300),
        short_circuit_socket=str(socket_path) if transport == "short_circuit" else None,
        fetch_urls=transport == "fetch_url",
    )


def print_cpu(figure: str, rounds: Rounds, gigabytes: float) -> None:
    """CPU seconds per GB of each process, the service's side and the bare one's: what
    the path costs, whatever the two cores' scheduling made of the wall clock."""
    print(f"{figure}: service " + rounds.cpu_line("measured", "GB", gigabytes))
    print(f"{figure}: bare " + rounds.cpu_line("baseline", "GB", gigabytes))


async def main() -> None:
    # The bench process plays the broker, as advised for client processes; its
    # bare transfers run on the same heap.
    keep_freed_memory()
    size = int(sys.argv[1]) * MIB if len(sys.argv) > 1 else 64 * MIB
    work = Path(tempfile.mkdtemp(prefix="remotelog-bench-"))
    log = work / "00000000000000000000.log"
    log.write_bytes(os.urandom(size))
    files = LogSegmentData(log, b"\0" * 8, b"\0" * 12, b"", b"0\n1\n0 0\n")
    moto, line = start(s3_server_command(), "PORT")
    endpoint = f"http://127.0.0.1:{line.split()[1]}"
    processes = [moto]
    report = Report("segment_store")
    try:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        results, reported, started = await measure(work, endpoint, bucket, files, size, moto.pid)
        processes += started
    finally:
        for process in processes:
            process.terminate()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)
    mb = size / 1e6

    def median_s(rounds: Rounds, side: str) -> float:
        return statistics.median(rounds.times[side])

    for (backend, transport), (copies, fetches) in results.items():
        report.info(
            f"{backend}_{transport}_mb_per_s",
            copy=round(mb / median_s(copies, "measured")),
            bare_copy=round(mb / median_s(copies, "baseline")),
            fetch=round(mb / median_s(fetches, "measured")),
            bare_fetch=round(mb / median_s(fetches, "baseline")),
            segment_mib=size // MIB,
        )
    report.info(
        "filesystem_fetch_contenders_mb_per_s",
        bare_grpc_stream=round(mb / median_s(results["filesystem", "grpc"][1], "baseline")),
        loopback_tcp=round(mb / median_s(reported["loopback"], "baseline")),
        page_cache_read=round(mb / median_s(reported["page cache"], "baseline")),
    )
    for (backend, transport), (copies, fetches) in results.items():
        name = backend if transport == "grpc" else f"{backend}_{transport}"
        if transport != "fetch_url":  # its copies are grpc's
            report.ratio_rounds(f"{name}_copy_vs_bare", copies.ratios["ratio"], 0.8)
            print_cpu(f"{name} copy", copies, size / 1e9)
        if (backend, transport) != ("s3", "short_circuit"):  # the same stream as grpc's
            against = (
                "bare_grpc_stream" if (backend, transport) == ("filesystem", "grpc") else "bare"
            )
            report.ratio_rounds(f"{name}_fetch_vs_{against}", fetches.ratios["ratio"], 0.8)
            print_cpu(f"{name} fetch", fetches, size / 1e9)
    # What the filesystem fetch reaches of the most any service could on this machine,
    # and of a read that crosses no process (no target: no service could reach it).
    report.ratio_rounds(
        "filesystem_fetch_vs_loopback_tcp", reported["loopback"].ratios["ratio"], None
    )
    report.ratio_rounds(
        "filesystem_fetch_vs_page_cache_read", reported["page cache"].ratios["ratio"], None
    )
    for figure in report.figures[:5]:
        print(figure)
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
