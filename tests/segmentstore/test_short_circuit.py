"""The segment store's short-circuit channel: copies and fetches by file descriptor.

The clients here point their gRPC side at a port nothing listens on, so what
works, worked through the unix socket; what falls back to gRPC fails there
with UNAVAILABLE, which shows that it fell back.
"""

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
import pytest_asyncio
from google.rpc import error_details_pb2, status_pb2
from support.services import new_bucket, start_store
from support.waiting import eventually

from remotelog.api.segmentstore.v1 import short_circuit_pb2 as pb
from remotelog.client import ClientOptions, IndexType, SegmentStoreClient
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import (
    InvalidArgumentError,
    RemoteResourceNotFoundError,
    ServiceUnavailableError,
)
from remotelog.core.model import SegmentFile
from remotelog.dev.broker import free_port
from remotelog.fileio import descriptor_socket
from remotelog.protocol.convert import segment_metadata_to_proto
from remotelog.segmentstore.filesystem import FileSystemStore
from remotelog.segmentstore.store import FileSlice, SegmentChunk, SegmentStore, StoreOptions

from .segments import segment_files, segment_metadata, synthetic_files

OPTIONS = ClientOptions(timeout_s=5, backoff=ExponentialBackoff(initial_ms=20, max_ms=100))


@pytest_asyncio.fixture(params=["filesystem", "s3"])
async def store(request, tmp_path, socket_dir, s3_endpoint):
    bucket = new_bucket(s3_endpoint)
    path = socket_dir / "store.sock"
    running = await start_store(
        request.param, tmp_path, s3_endpoint, bucket, **{"short.circuit.socket.path": str(path)}
    )
    running.socket_path = path
    # gRPC only to a port with no server: what succeeds took the socket.
    running.local = SegmentStoreClient(
        f"127.0.0.1:{free_port()}", short_circuit_socket=str(path), options=OPTIONS
    )
    yield running
    await running.local.close()
    await running.stop()


async def read(client, metadata, start=0, end=None) -> bytes:
    return b"".join([chunk async for chunk in client.fetch_log_segment(metadata, start, end)])


def descriptors_on() -> dict[str, str]:
    """This process's descriptors and what each is open on."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed while listed
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


def opened_since(before: dict[str, str], root: Path, *also: str) -> dict[str, str]:
    """Descriptors opened since `before` on a file under `root`, on a socket or on one
    of `also`: what a lent segment file or a kept connection leaves. Others (a worker's
    other clients and servers) come and go on their own."""
    return {
        fd: target
        for fd, target in descriptors_on().items()
        if before.get(fd) != target and target.startswith((str(root), "socket:", *also))
    }


async def test_real_segments_copied_by_descriptor_read_back_byte_for_byte(store, kafka_logs):
    for log in sorted((kafka_logs / "test_topic_a-0").glob("*.log")):
        metadata = segment_metadata(log, topic="test_topic_a")
        files = segment_files(log)
        await store.local.copy_log_segment_data(metadata, files)
        # What the gRPC client reads is what the descriptors lent.
        assert await read(store.client, metadata) == log.read_bytes()
        assert await store.client.fetch_index(metadata, IndexType.OFFSET) == (
            files.offset_index.read_bytes()
        )
        assert await store.client.fetch_index(metadata, IndexType.LEADER_EPOCH) == (
            files.leader_epoch_index
        )
        if store.backend == "filesystem":
            assert await read(store.local, metadata) == log.read_bytes()


async def test_s3_fetches_take_the_grpc_stream(store):
    if store.backend == "filesystem":
        pytest.skip("the filesystem backend hands out its files")
    metadata = segment_metadata(size=100)
    await store.local.copy_log_segment_data(metadata, synthetic_files(b"s" * 100))
    # S3 keeps no local files: the fetch takes gRPC, here a dead port.
    with pytest.raises(ServiceUnavailableError):
        [chunk async for chunk in store.local.fetch_log_segment(metadata, 0, timeout_s=0.5)]
    assert await read(store.client, metadata) == b"s" * 100


async def test_a_long_read_by_descriptor_leaves_no_descriptor_open(
    tmp_path, socket_dir, s3_endpoint
):
    path = socket_dir / "store.sock"
    running = await start_store(
        "filesystem", tmp_path, s3_endpoint, **{"short.circuit.socket.path": str(path)}
    )
    before = descriptors_on()
    local = SegmentStoreClient(
        f"127.0.0.1:{free_port()}", short_circuit_socket=str(path), options=OPTIONS
    )
    try:
        data = os.urandom(9 * 1024 * 1024)  # longer than two read chunks
        metadata = segment_metadata(size=len(data))
        await local.copy_log_segment_data(metadata, synthetic_files(data))
        start = 4 * 1024 * 1024 - 1
        assert await read(local, metadata, start) == data[start:]
    finally:
        await local.close()
        # The descriptors lent, sent and read, the client's kept connections and
        # the store's ends of them: all closed.
        await eventually(
            lambda: opened_since(before, tmp_path) == {},
            timeout_s=15,
            why=lambda: opened_since(before, tmp_path),
        )
        await running.stop()


async def test_bad_copies_by_descriptor_are_refused_and_write_nothing(store, tmp_path):
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"z" * 500)
    files = synthetic_files(b"")
    files = type(files)(log, files.offset_index, files.time_index, b"", b"0\n0\n")
    wrong_size = segment_metadata(size=499)
    with pytest.raises(InvalidArgumentError) as raised:
        await store.local.copy_log_segment_data(wrong_size, files)
    assert raised.value.field == "metadata.segment_size_in_bytes"
    assert store.objects() == {}
    assert store.incomplete_uploads() == 0


async def test_without_the_socket_the_client_goes_over_grpc(store, socket_dir):
    client = SegmentStoreClient(
        f"127.0.0.1:{store.service.port}",
        short_circuit_socket=str(socket_dir / "none.sock"),
        options=OPTIONS,
    )
    try:
        data = os.urandom(5000)
        metadata = segment_metadata(size=5000)
        await client.copy_log_segment_data(metadata, synthetic_files(data))
        assert await read(client, metadata, 10, 4000) == data[10:4001]
    finally:
        await client.close()


async def test_a_restarted_store_is_reached_on_a_new_connection(tmp_path, socket_dir, s3_endpoint):
    path = socket_dir / "store.sock"
    extra = {"short.circuit.socket.path": str(path)}
    local = SegmentStoreClient(
        f"127.0.0.1:{free_port()}", short_circuit_socket=str(path), options=OPTIONS
    )
    try:
        for _ in range(2):  # the second round's kept connection is to the stopped store
            running = await start_store("filesystem", tmp_path, s3_endpoint, **extra)
            metadata = segment_metadata(size=64)
            await local.copy_log_segment_data(metadata, synthetic_files(b"r" * 64))
            assert await read(local, metadata) == b"r" * 64
            await running.stop()
            assert not path.exists()  # removed at stop: a restart binds
    finally:
        await local.close()


async def raw_call(path: Path, request: bytes, fds=()) -> tuple[pb.ShortCircuitResponse, list]:
    sock = descriptor_socket.seqpacket_socket()
    try:
        await asyncio.get_running_loop().sock_connect(sock, str(path))
        await descriptor_socket.send(sock, request, fds)
        data, received = await descriptor_socket.receive(sock, 65536, 4)
    finally:
        sock.close()
    descriptor_socket.close_all(received)
    return pb.ShortCircuitResponse.FromString(data), received


def refusal(response: pb.ShortCircuitResponse) -> tuple[int, str, str]:
    """(code, field, message) of a refused request."""
    status = status_pb2.Status.FromString(response.status)
    field = ""
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            field = bad.field_violations[0].field
    return status.code, field, status.message


def copy_request(metadata, files, topic=None) -> bytes:
    proto = segment_metadata_to_proto(metadata)
    if topic is not None:
        proto.remote_log_segment_id.topic_id_partition.topic = topic
    return pb.ShortCircuitRequest(
        copy_log_segment_data=pb.ShortCircuitCopy(metadata=proto, files=files)
    ).SerializeToString()


async def test_malformed_requests_are_invalid_argument_and_leak_no_descriptor(store, tmp_path):
    if store.backend == "s3":
        pytest.skip("the checks come before the backend")
    log = tmp_path / "seg.log"
    log.write_bytes(b"l" * 10)
    metadata = segment_metadata(size=10)
    all_files = [1, 2, 3, 5, 6]
    before = descriptors_on()
    reader, writer = os.pipe()
    pipe = os.readlink(f"/proc/self/fd/{reader}")
    write_only = os.open(log, os.O_WRONLY)
    readable = [os.open(log, os.O_RDONLY) for _ in all_files]
    try:
        cases = [
            (b"\xff\xff", [], "request"),
            (copy_request(metadata, all_files), readable[:2], "files"),  # 5 named, 2 came
            (copy_request(metadata, [1, 1]), readable[:2], "files"),  # the log twice
            (copy_request(metadata, [1]), [reader], "files"),  # a pipe
            (copy_request(metadata, [1]), [write_only], "files"),
            (copy_request(metadata, [9]), readable[:1], "files"),
            (copy_request(metadata, all_files, "../../etc"), readable, "metadata"),
        ]
        for request, fds, field in cases:
            response, received = await raw_call(store.socket_path, request, fds)
            code, named, message = refusal(response)
            assert (code, named.split(".")[0]) == (3, field), message  # 3 = INVALID_ARGUMENT
            assert received == []
        assert store.objects() == {}
    finally:
        for fd in [reader, writer, write_only, *readable]:
            os.close(fd)
    # The store runs in this process: every descriptor it was lent is closed again
    # (and its ends of the connections, once it has seen them close).

    await eventually(
        lambda: opened_since(before, tmp_path, pipe) == {},
        timeout_s=5,
        why=lambda: opened_since(before, tmp_path, pipe),
    )


async def test_a_copy_from_a_file_that_shrank_is_refused_and_leaves_nothing(tmp_path):
    objects = FileSystemStore(tmp_path / "segments")
    store = SegmentStore(objects, StoreOptions())
    log = tmp_path / "seg.log"
    log.write_bytes(b"s" * 100)
    metadata = segment_metadata(size=150)
    fd = os.open(log, os.O_RDONLY)
    try:

        async def chunks():
            # Announced at 150 bytes (its size when lent), 100 there when read.
            yield SegmentChunk(SegmentFile.LOG, 0, FileSlice(fd, 0, 150))
            for file in (SegmentFile.OFFSET_INDEX, SegmentFile.TIME_INDEX):
                yield SegmentChunk(file, 0, b"")

        with pytest.raises(InvalidArgumentError, match="ended after 100 of its 150 bytes"):
            await store.copy_log_segment_data(metadata, chunks())
    finally:
        os.close(fd)
        await objects.close()
    assert [p for p in (tmp_path / "segments").rglob("*") if p.is_file()] == []


async def test_a_second_store_does_not_take_a_live_socket(store, tmp_path, s3_endpoint):
    if store.backend == "s3":
        pytest.skip("one backend is enough")
    (tmp_path / "second").mkdir()
    with pytest.raises(OSError, match=r"short\.circuit\.socket\.path: .* is in use"):
        await start_store(
            "filesystem",
            tmp_path / "second",
            s3_endpoint,
            "unused",
            **{"short.circuit.socket.path": str(store.socket_path)},
        )
    metadata = segment_metadata(size=8)
    await store.local.copy_log_segment_data(metadata, synthetic_files(b"12345678"))
    assert await read(store.local, metadata) == b"12345678"


async def test_long_reads_as_views_are_mapped_and_read_the_same_bytes(store):
    if store.backend == "s3":
        pytest.skip("S3 fetches take the gRPC stream")
    size = 19 * 1024 * 1024 + 123  # several mapped blocks, the last short
    data = os.urandom(size)
    metadata = segment_metadata(size=size)
    await store.local.copy_log_segment_data(metadata, synthetic_files(data))
    for start, end in [(0, None), (5, size - 7), (3 * 1024 * 1024 + 1, None)]:
        chunks = [c async for c in store.local.fetch_log_segment_views(metadata, start, end)]
        assert all(isinstance(c, memoryview) for c in chunks)  # uncopied
        assert b"".join(chunks) == data[start : None if end is None else end + 1]
    short = [c async for c in store.local.fetch_log_segment_views(metadata, 10, 1000)]
    assert short == [data[10:1001]]  # a Fetch-sized read is one pread, or one view
    # The log's descriptor is kept and these bytes are cached: a view of its mapping.
    (again,) = [c async for c in store.local.fetch_log_segment_views(metadata, 4096, 9999)]
    assert isinstance(again, memoryview)
    assert again == data[4096:10000]
    await store.client.delete_log_segment_data(metadata)
    with pytest.raises(RemoteResourceNotFoundError):  # the kept mapping is not served
        _ = [c async for c in store.local.fetch_log_segment_views(metadata, 10, 1000)]
    assert again == data[4096:10000]  # a view lent before still reads its pages
