"""The segment store's contract, run against the filesystem and the S3 (moto) backends alike."""

import asyncio
import gc
import json
import os
import re
from pathlib import Path

import grpc
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from support.s3 import s3_client
from support.waiting import eventually

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.client import IndexType, LogSegmentData
from remotelog.core.deadline import current_deadline
from remotelog.core.errors import InvalidArgumentError, RemoteResourceNotFoundError
from remotelog.core.model import kafka_uuid_str
from remotelog.fetch.direct import DirectSegmentReader
from remotelog.protocol.convert import segment_metadata_to_proto
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.layout import Manifest, SegmentKeys

from .segments import segment_files, segment_metadata, synthetic_files

MIB = 1024 * 1024


async def fetch(store, metadata, start=0, end=None) -> bytes:
    return b"".join([c async for c in store.client.fetch_log_segment(metadata, start, end)])


@pytest.mark.parametrize("directory", ["test_topic_a-0", "timeindex_test"])
async def test_real_segments_round_trip_byte_for_byte(store, kafka_logs, directory):
    logs = sorted((kafka_logs / directory).glob("*.log"))
    for log in logs:
        metadata = segment_metadata(log, topic=directory.removesuffix("-0"))
        files = segment_files(log)
        custom = await store.client.copy_log_segment_data(metadata, files)
        assert json.loads(custom)["remote_size"] >= log.stat().st_size
        assert await fetch(store, metadata) == log.read_bytes()
        for index_type, source in [
            (IndexType.OFFSET, files.offset_index),
            (IndexType.TIMESTAMP, files.time_index),
            (IndexType.PRODUCER_SNAPSHOT, files.producer_snapshot_index),
            (IndexType.LEADER_EPOCH, files.leader_epoch_index),
        ]:
            expected = source.read_bytes() if hasattr(source, "read_bytes") else source
            assert await store.client.fetch_index(metadata, index_type) == expected
        with pytest.raises(RemoteResourceNotFoundError, match="no transaction index"):
            await store.client.fetch_index(metadata, IndexType.TRANSACTION)


async def test_object_layout_and_manifest(store):
    metadata = segment_metadata(size=3000, start_offset=4242)
    await store.client.copy_log_segment_data(metadata, synthetic_files(b"L" * 3000, txn=b"T" * 34))
    tip = metadata.topic_id_partition
    base = (
        f"orders-{kafka_uuid_str(tip.topic_id)}/0/00000000000000004242-"
        f"{kafka_uuid_str(metadata.remote_log_segment_id.id)}"
    )
    objects = store.objects()
    assert set(objects) == {f"{base}.log", f"{base}.indexes", f"{base}.rsm-manifest"}
    assert objects[f"{base}.log"] == 3000
    assert objects[f"{base}.indexes"] == 16 + 24 + 34 + 4 + len(b"0\n1\n0 0\n")
    manifest = Manifest.from_json(await store.service.app.objects.get(f"{base}.rsm-manifest"), "")
    assert manifest.metadata == metadata
    assert manifest.log_size == 3000
    assert await store.client.fetch_index(metadata, IndexType.TRANSACTION) == b"T" * 34
    assert re.fullmatch(r"[0-9]{20}-[A-Za-z0-9_-]{22}\.log", f"{base}.log".split("/")[-1])


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 0, slice(0, 1)),
        (0, 9_999, slice(0, 10_000)),
        (9_999, None, slice(9_999, 10_000)),
        (123, 5_000_000, slice(123, 10_000)),
        (500, 700, slice(500, 701)),
    ],
)
async def test_ranges(store, start, end, expected):
    data = os.urandom(10_000)
    metadata = segment_metadata(size=len(data))
    await store.client.copy_log_segment_data(metadata, synthetic_files(data))
    assert await fetch(store, metadata, start, end) == data[expected]


async def test_views_are_the_same_chunks_without_the_copy(store):
    data = os.urandom(2 * MIB + 12_345)
    metadata = segment_metadata(size=len(data))
    await store.client.copy_log_segment_data(metadata, synthetic_files(data))
    copies = [c async for c in store.client.fetch_log_segment(metadata, 100, None)]
    views = [c async for c in store.client.fetch_log_segment_views(metadata, 100, None)]
    assert len(views) == len(copies) > 1
    assert all(type(v) is memoryview for v in views)
    assert all(type(c) is bytes for c in copies)
    assert [bytes(v) for v in views] == copies
    assert b"".join(views) == data[100:]


@pytest.mark.parametrize(
    ("start", "end", "field"),
    [
        (10_000, None, "start_position"),
        (20_000, 30_000, "start_position"),
        (-1, None, "start_position"),
        (50, 10, "end_position"),
    ],
)
async def test_bad_ranges_name_the_field(store, start, end, field):
    metadata = segment_metadata(size=10_000)
    await store.client.copy_log_segment_data(metadata, synthetic_files(bytes(10_000)))
    with pytest.raises(InvalidArgumentError) as caught:
        await fetch(store, metadata, start, end)
    assert caught.value.field == field


@pytest.mark.parametrize("chunk_bytes", [MIB, 700_001])  # parts cut at or inside chunks
async def test_multipart_sized_segment_round_trips(store, chunk_bytes):
    data = os.urandom(12 * MIB + 12345)  # three 5 MiB parts on S3
    metadata = segment_metadata(size=len(data))
    await store.client.copy_log_segment_data(
        metadata, synthetic_files(data), chunk_bytes=chunk_bytes
    )
    assert await fetch(store, metadata) == data
    assert (
        await fetch(store, metadata, 5 * MIB - 10, 5 * MIB + 10)
        == data[5 * MIB - 10 : 5 * MIB + 11]
    )


def _evict(path: Path) -> None:
    """Drop `path`'s pages from the page cache (written back first), as if never read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.parametrize("in_page_cache", [True, False])
async def test_files_on_disk_round_trip_in_or_out_of_the_page_cache(store, tmp_path, in_page_cache):
    """A file's chunks are read on the event loop when the page cache holds them and by
    a thread when they must come from a disk: the same bytes either way, at every cut."""
    chunk = 64 * 1024
    contents = {
        "00000000000000000000.log": os.urandom(2 * chunk + 123),  # a short last chunk
        "00000000000000000000.index": os.urandom(chunk),  # exactly one chunk
        "00000000000000000000.timeindex": b"",  # no chunk but an empty one
    }
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
        if not in_page_cache:
            _evict(tmp_path / name)
    log, offset_index, time_index = (tmp_path / name for name in contents)
    files = LogSegmentData(log, offset_index, time_index, b"snap", b"0\n1\n0 0\n")
    metadata = segment_metadata(size=log.stat().st_size)
    await store.client.copy_log_segment_data(metadata, files, chunk_bytes=chunk)
    assert await fetch(store, metadata) == log.read_bytes()
    assert await store.client.fetch_index(metadata, IndexType.OFFSET) == offset_index.read_bytes()
    assert await store.client.fetch_index(metadata, IndexType.TIMESTAMP) == b""


async def test_copy_aborted_mid_stream_leaves_nothing_and_a_retry_completes(telemetry, store):
    """Traced, as `serve` and the deployments run the services: the caller's cancel
    reaches the call, which reads no more of its request stream."""
    data = os.urandom(12 * MIB)
    metadata = segment_metadata(size=len(data))
    stub = pb_grpc.SegmentStoreServiceStub(store.client.channel)
    sent, cancelled = asyncio.Event(), asyncio.Event()
    read_after_cancel = []

    async def half_then_the_rest_once_cancelled():
        yield pb.CopyLogSegmentDataRequest(metadata=segment_metadata_to_proto(metadata))
        for position in range(0, len(data), MIB):
            if position == 7 * MIB:
                sent.set()
                await cancelled.wait()
            if cancelled.is_set():
                read_after_cancel.append(position)
            yield pb.CopyLogSegmentDataRequest(
                chunk=pb.SegmentDataChunk(
                    file=pb.SEGMENT_FILE_LOG,
                    position=position,
                    data=data[position : position + MIB],
                )
            )

    call = stub.CopyLogSegmentData(half_then_the_rest_once_cancelled(), timeout=30)
    await sent.wait()
    await asyncio.sleep(0.5)  # the server has parts of it in flight
    call.cancel()
    cancelled.set()
    prefix = metadata.topic_id_partition.topic
    # The server aborts asynchronously after the cancellation.
    await eventually(lambda: not store.objects(prefix) and store.incomplete_uploads() == 0)
    assert store.objects(prefix) == {}
    assert store.incomplete_uploads() == 0
    assert read_after_cancel == []  # else the rest went out and the copy completed

    await store.client.copy_log_segment_data(metadata, synthetic_files(data))
    assert len(store.objects(prefix)) == 3
    assert await fetch(store, metadata) == data

    # The retry, traced: its client span ends when the call does, OK, the server's
    # span its child; the cancelled call's client span ended CANCELLED.
    _, spans = telemetry
    copy = "/remotelog.api.segmentstore.v1.SegmentStoreService/CopyLogSegmentData"

    def copies(kind: SpanKind) -> list:
        return [s for s in spans.get_finished_spans() if s.name == copy and s.kind is kind]

    await eventually(lambda: len(copies(SpanKind.CLIENT)) == 2)
    aborted, retried = copies(SpanKind.CLIENT)
    assert aborted.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert aborted.status.status_code is StatusCode.ERROR
    assert retried.attributes["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0]
    assert retried.status.status_code is StatusCode.UNSET
    served = [s for s in copies(SpanKind.SERVER) if s.context.trace_id == retried.context.trace_id]
    assert [s.parent.span_id for s in served] == [retried.context.span_id]


async def test_delete_twice_then_fetch_is_not_found(store):
    metadata = segment_metadata(size=100)
    await store.client.copy_log_segment_data(metadata, synthetic_files(bytes(100)))
    await store.client.delete_log_segment_data(metadata)
    await store.client.delete_log_segment_data(metadata)
    assert store.objects(metadata.topic_id_partition.topic) == {}
    if store.backend == "filesystem":
        # Nor an empty directory: the partition's and its topic's are gone.
        assert list(Path(store.config.storage_root).iterdir()) == []
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        await fetch(store, metadata)
    assert caught.value.grpc_code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(RemoteResourceNotFoundError):
        await store.client.fetch_index(metadata, IndexType.OFFSET)


def chunk(file, position, data):
    return pb.CopyLogSegmentDataRequest(
        chunk=pb.SegmentDataChunk(file=file, position=position, data=data)
    )


def valid_chunks(log: bytes):
    return [
        chunk(pb.SEGMENT_FILE_LOG, 0, log),
        chunk(pb.SEGMENT_FILE_OFFSET_INDEX, 0, b""),
        chunk(pb.SEGMENT_FILE_TIME_INDEX, 0, b""),
        chunk(pb.SEGMENT_FILE_PRODUCER_SNAPSHOT, 0, b""),
        chunk(pb.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT, 0, b""),
    ]


def with_topic(metadata, topic):
    proto = segment_metadata_to_proto(metadata)
    proto.remote_log_segment_id.topic_id_partition.topic = topic
    return proto


async def refused_copy(store, messages) -> str:
    """The details of the INVALID_ARGUMENT a copy sending `messages` gets; nothing written."""
    stub = pb_grpc.SegmentStoreServiceStub(store.client.channel)

    async def requests():
        for message in messages:
            yield message

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CopyLogSegmentData(requests(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert store.objects() == {}
    assert store.incomplete_uploads() == 0
    return caught.value.details()


async def test_a_copy_must_start_with_its_metadata(store):
    details = await refused_copy(store, valid_chunks(b"z" * 10))
    assert "the first message must carry the metadata" in details


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda m, c: (with_topic(m, "../../etc"), c), "metadata.remote_log_segment_id"),
        (lambda m, c: (with_topic(m, "a/b"), c), "metadata.remote_log_segment_id"),
        (lambda m, c: (with_topic(m, ".."), c), "metadata.remote_log_segment_id"),
        (lambda m, c: (segment_metadata_to_proto(m), c[1:]), "chunk.file"),
        (
            lambda m, c: (
                segment_metadata_to_proto(m),
                [chunk(pb.SEGMENT_FILE_LOG, 0, b"x" * 5 * MIB)],
            ),
            "chunk.data",
        ),
        (
            lambda m, c: (segment_metadata_to_proto(m), [chunk(pb.SEGMENT_FILE_LOG, 1, b"x"), *c]),
            "chunk.position",
        ),
        (lambda m, c: (segment_metadata_to_proto(m), [chunk(0, 0, b"x")]), "chunk.file"),
        (
            lambda m, c: (
                segment_metadata_to_proto(m),
                [pb.CopyLogSegmentDataRequest(metadata=segment_metadata_to_proto(m)), *c],
            ),
            "every message after the first is a chunk",
        ),
        (
            lambda m, c: (
                segment_metadata_to_proto(m),
                [chunk(pb.SEGMENT_FILE_LOG, 0, b"y" * 20), *c[1:]],
            ),
            "chunk.data",
        ),
        (
            lambda m, c: (
                segment_metadata_to_proto(m),
                [chunk(pb.SEGMENT_FILE_LOG, 0, b"y" * 5), *c[1:]],
            ),
            "metadata.segment_size_in_bytes",
        ),
    ],
)
async def test_bad_copies_are_invalid_argument_and_write_nothing(store, mutate, field):
    metadata = segment_metadata(size=10)
    proto, chunks = mutate(metadata, valid_chunks(b"z" * 10))
    details = await refused_copy(store, [pb.CopyLogSegmentDataRequest(metadata=proto), *chunks])
    assert field in details


async def test_a_copy_refused_early_reports_the_refusal_while_the_client_still_writes(store):
    # grpc-python's client turns a write that fails after the server ended the call
    # into INTERNAL (grpc/grpc#36066): without the store reading to the half-close,
    # 1-3% of these calls came back INTERNAL, so 250 tries catch a regression.
    metadata = segment_metadata(size=200)
    stub = pb_grpc.SegmentStoreServiceStub(store.client.channel)

    async def requests(pause_s):
        yield pb.CopyLogSegmentDataRequest(metadata=with_topic(metadata, ".."))
        for i in range(20):
            yield chunk(pb.SEGMENT_FILE_LOG, i * 10, b"p" * 10)
            await asyncio.sleep(pause_s)

    codes = []
    for attempt in range(250):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.CopyLogSegmentData(requests(0.0001 * (attempt % 2)), timeout=10)
        codes.append(caught.value.code())
    assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
    assert store.objects() == {}


async def test_first_message_must_be_metadata(store):
    stub = pb_grpc.SegmentStoreServiceStub(store.client.channel)

    async def requests():
        yield chunk(pb.SEGMENT_FILE_LOG, 0, b"x")

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CopyLogSegmentData(requests(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("metadata:")


async def test_a_fetch_abandoned_early_is_closed_in_its_own_task(store):
    """Closing a fetch stream closes every generator under it then and there.

    A nested async generator left to the garbage collector is closed later from
    another task, where its span and deadline context tokens cannot be reset:
    the loop then reports "Task exception was never retrieved" once per
    abandoned read (a remote Fetch abandons one every time it fills max_bytes).
    """
    size = 5 * MIB
    metadata = segment_metadata(size=size)
    data = os.urandom(size)
    await store.client.copy_log_segment_data(metadata, synthetic_files(data))
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        for reader in (DirectSegmentReader(store.service.app), store.client):
            chunks = reader.fetch_log_segment(metadata, 0, timeout_s=10)
            first = await anext(chunks)
            assert 0 < len(first) < size
            assert first == data[: len(first)]
            await chunks.aclose()
            gc.collect()
            for _ in range(20):
                await asyncio.sleep(0.01)
            pumps = [
                t
                for t in asyncio.all_tasks()
                if t.get_coro().__qualname__ == "read_ahead.<locals>.pump"
            ]
            assert pumps == []  # the read-ahead task ended with the stream
            assert current_deadline() is None
    finally:
        loop.set_exception_handler(previous)
    assert reported == []


async def abandon_upload(store, key: str) -> None:
    """What a store killed mid-copy leaves: an upload begun and never ended."""
    if store.backend in ("gcs", "azure"):
        # A backend of its own, closed with its upload's first part sent: as if killed.
        objects = await open_backend(store.config, store.config.backoff())
        upload = objects.open_upload(key)
        await upload.write(os.urandom(6 * MIB))  # past the 5 MiB part
        await upload.sent()
        await objects.close()
        return
    if store.backend == "filesystem":
        path = Path(store.config.storage_root) / f"{key}.{os.urandom(6).hex()}.tmp"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(3 * MIB))
        return
    s3 = s3_client(store.endpoint)
    bucket = store.config.s3_bucket_name
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)
    s3.upload_part(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * (5 * MIB)
    )


async def test_deleting_a_segment_removes_the_upload_a_killed_copy_left(store):
    """Kafka deletes the segment of a copy that failed; what the store was writing when
    it was killed goes with it, or nothing would ever remove it."""
    data = os.urandom(2 * MIB)
    metadata = segment_metadata(size=len(data))
    other, third = segment_metadata(size=len(data)), segment_metadata(size=len(data))
    await store.client.copy_log_segment_data(other, synthetic_files(data))
    await abandon_upload(store, SegmentKeys.of("", metadata).log)
    await abandon_upload(store, SegmentKeys.of("", third).log)
    assert store.incomplete_uploads() == 2
    await store.client.delete_log_segment_data(metadata)
    assert store.incomplete_uploads() == 1  # another segment's is not touched
    assert await fetch(store, other) == data
