"""Copies whose bytes skip the store's gRPC stream: by signed multipart upload (S3's, GCS
part objects, Azure blocks), the caller PUTting the parts itself, and by path (the store
reads the broker's files). What is read back is what was sent; what did not arrive as
sent is refused and leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from base64 import b64encode
from dataclasses import dataclass, replace

import aiohttp
import grpc
import pytest
import pytest_asyncio
from support.rpcs import error_info
from support.s3 import s3_client
from support.services import start_store
from support.tls import Certificates, make_certificates, server_tls_settings
from support.waiting import eventually

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.client import ClientOptions, IndexType, SegmentStoreClient
from remotelog.core.model import SegmentFile
from remotelog.core.states import RemoteLogSegmentState
from remotelog.protocol.convert import segment_file_to_proto, segment_metadata_to_proto
from remotelog.segmentstore.direct_copy import (
    UPLOAD_URL_MARGIN_S,
    DirectCopies,
    LocalFile,
    allowed_roots,
)
from remotelog.segmentstore.layout import Manifest, SegmentKeys
from remotelog.transforms.chunks import ChunkCodec, DataKey, SegmentObjectKind, encode_chunks

from .segments import segment_files, segment_metadata
from .test_transforms import CHUNK, local_ring

COPY_TIMEOUT_MS = 120_000
# What a PUT by URL answers: S3 and GCS 200, Azure 201.
CREATED = {200, 201}
PART = 5 * 1024 * 1024  # the test stores' part size: S3's smallest
INDEXES = {
    SegmentFile.OFFSET_INDEX: IndexType.OFFSET,
    SegmentFile.TIME_INDEX: IndexType.TIMESTAMP,
    SegmentFile.PRODUCER_SNAPSHOT: IndexType.PRODUCER_SNAPSHOT,
    SegmentFile.LEADER_EPOCH_CHECKPOINT: IndexType.LEADER_EPOCH,
    SegmentFile.TRANSACTION_INDEX: IndexType.TRANSACTION,
}


class Stub:
    """The store's running service and a raw stub of it (over TLS with `certificates`)."""

    def __init__(self, running, certificates: Certificates | None = None):
        self.running, self.certificates = running, certificates
        self.client = running.client  # the library's client, over TLS too where it is on
        if certificates is None:
            self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.service.port}")
        else:
            tls = ClientOptions(
                tls_root_certs_file=str(certificates.ca),
                tls_cert_file=str(certificates.client_cert),
                tls_key_file=str(certificates.client_key),
            )
            self.client = SegmentStoreClient(f"localhost:{running.service.port}", options=tls)
            credentials = grpc.ssl_channel_credentials(
                certificates.ca.read_bytes(),
                certificates.client_key.read_bytes(),
                certificates.client_cert.read_bytes(),
            )
            self.channel = grpc.aio.secure_channel(f"localhost:{running.service.port}", credentials)
        self.rpc = pb_grpc.SegmentStoreServiceStub(self.channel)

    async def close(self):
        if self.client is not self.running.client:
            await self.client.close()
        await self.channel.close()
        await self.running.stop()


@pytest_asyncio.fixture
async def s3(tmp_path, s3_endpoint):
    stub = Stub(await start_store("s3", tmp_path, s3_endpoint))
    yield stub
    await stub.close()


@pytest_asyncio.fixture(params=["s3", "gcs", "azure"])
async def url_store(request, tmp_path, s3_endpoint, cloud_emulators):
    """A store on each cloud's object store, signing upload URLs."""
    stub = Stub(await start_store(request.param, tmp_path, s3_endpoint, emulators=cloud_emulators))
    yield stub
    await stub.close()


@pytest_asyncio.fixture(params=["filesystem", "s3"])
async def by_path(request, tmp_path, s3_endpoint, kafka_logs):
    """A store on each backend that may read the broker-written segments and tmp_path."""
    allowed = f"{kafka_logs},{tmp_path / 'broker'}"
    running = await start_store(
        request.param, tmp_path, s3_endpoint, **{"copy.paths.allowed": allowed}
    )
    stub = Stub(running)
    yield stub
    await stub.close()


def segment_contents(log) -> dict[SegmentFile, bytes]:
    """A broker-written segment's files' bytes, as the plugin would send them."""
    files = segment_files(log)
    contents = {
        SegmentFile.LOG: log.read_bytes(),
        SegmentFile.OFFSET_INDEX: files.offset_index.read_bytes(),
        SegmentFile.TIME_INDEX: files.time_index.read_bytes(),
        SegmentFile.LEADER_EPOCH_CHECKPOINT: files.leader_epoch_index,
    }
    snapshot = files.producer_snapshot_index
    contents[SegmentFile.PRODUCER_SNAPSHOT] = (
        snapshot if isinstance(snapshot, bytes) else snapshot.read_bytes()
    )
    return contents


def sizes(contents: dict[SegmentFile, bytes]) -> list[pb.SegmentFileSize]:
    return [
        pb.SegmentFileSize(file=segment_file_to_proto(f), size=len(data))
        for f, data in contents.items()
    ]


def part_plan(log: bytes, part_size: int = PART) -> list[pb.UploadedPart]:
    """The log's parts as the plugin plans them: `part_size` each, the last shorter."""
    return [
        pb.UploadedPart(
            part_number=number,
            size=len(log[position : position + part_size]),
            md5=hashlib.md5(log[position : position + part_size]).hexdigest(),
        )
        for number, position in enumerate(range(0, max(len(log), 1), part_size), 1)
    ]


def indexes_of(contents: dict[SegmentFile, bytes]) -> bytes:
    """The indexes object: the files but the log in SegmentFile's order."""
    return b"".join(contents.get(f, b"") for f in INDEX_ORDER)


INDEX_ORDER = [f for f in SegmentFile if f is not SegmentFile.LOG]


@dataclass(frozen=True)
class Encoded:
    """A segment's objects as a caller PUTs them: as they are, or as stored chunks."""

    log: bytes
    indexes: bytes
    chunks: pb.UploadedChunks | None = None

    @classmethod
    def plain(cls, contents: dict[SegmentFile, bytes]) -> Encoded:
        return cls(contents.get(SegmentFile.LOG, b""), indexes_of(contents))


async def start(stub, metadata, contents, timeout_ms=COPY_TIMEOUT_MS, parts=None, encoded=None):
    encoded = encoded or Encoded.plain(contents)
    return await stub.rpc.StartSegmentUpload(
        pb.StartSegmentUploadRequest(
            metadata=segment_metadata_to_proto(metadata),
            files=sizes(contents),
            copy_timeout_ms=timeout_ms,
            log_parts=part_plan(encoded.log) if parts is None else parts,
            indexes_md5=hashlib.md5(encoded.indexes).hexdigest(),
            chunks=encoded.chunks,
        )
    )


async def put(session: aiohttp.ClientSession, url: str, body: bytes, headers=None) -> int:
    """PUT `body` to a presigned URL as the plugin does, its Content-MD5 and the headers
    the store named; S3's answer."""
    headers = {
        "Content-MD5": b64encode(hashlib.md5(body).digest()).decode(),
        "Content-Type": "application/octet-stream",
        **(headers or {}),
    }
    async with session.put(url, data=body, headers=headers) as response:
        await response.read()
        return response.status


async def put_all(upload, contents, *, skip_indexes=False, encoded=None) -> list[pb.UploadedPart]:
    """Every part and the indexes PUT in parallel; what the complete request says of them."""
    encoded = encoded or Encoded.plain(contents)
    log = encoded.log
    async with aiohttp.ClientSession() as session:
        answers = await asyncio.gather(
            *(put(session, p.url, log[p.position : p.position + p.size]) for p in upload.log_parts)
        )
        if not skip_indexes:
            answers.append(
                await put(session, upload.indexes_url, encoded.indexes, upload.indexes_headers)
            )
    assert set(answers) <= CREATED
    assert [segment_file_to_proto(f) for f in INDEX_ORDER if f in contents] == list(
        upload.index_order
    )
    return [
        pb.UploadedPart(
            part_number=p.part_number,
            size=p.size,
            md5=hashlib.md5(log[p.position : p.position + p.size]).hexdigest(),
        )
        for p in upload.log_parts
    ]


async def complete(stub, metadata, upload, contents, parts, chunks=None):
    return await stub.rpc.CompleteSegmentUpload(
        pb.CompleteSegmentUploadRequest(
            metadata=segment_metadata_to_proto(metadata),
            upload_id=upload.upload_id,
            files=sizes(contents),
            log_parts=parts,
            chunks=chunks,
        )
    )


async def read_back(client, metadata) -> dict[SegmentFile, bytes]:
    log = b"".join([c async for c in client.fetch_log_segment(metadata, 0)])
    read = {SegmentFile.LOG: log}
    for file, index in INDEXES.items():
        if file is not SegmentFile.TRANSACTION_INDEX:
            read[file] = await client.fetch_index(metadata, index)
    return read


def refused(error: grpc.aio.AioRpcError, code: grpc.StatusCode, field: str | None = None):
    assert error.code() == code, error.details()
    if field is not None:
        assert error_info(error).metadata["field"] == field, error.details()


@pytest_asyncio.fixture(
    params=[("s3", ""), ("s3", "aws:kms"), ("gcs", ""), ("azure", "")],
    ids=["s3", "s3-sse-kms", "gcs", "azure"],
)
async def by_url(request, tmp_path, s3_endpoint, cloud_emulators):
    """A store on each cloud, and on S3 one asking for SSE-KMS too: a bucket whose ETags
    are no MD5s (tests/support/s3_server.py makes them as S3 does)."""
    backend, sse = request.param
    extra = {"storage.s3.sse": sse} if sse else {}
    running = await start_store(backend, tmp_path, s3_endpoint, emulators=cloud_emulators, **extra)
    stub = Stub(running)
    yield stub, sse
    await stub.close()


# The headers a whole object's PUT must send as they are, beside Content-MD5.
SIGNED_PUT_HEADERS = {"s3": {}, "gcs": {}, "azure": {"x-ms-blob-type": "BlockBlob"}}


async def test_segments_put_by_url_read_back_byte_for_byte(by_url, kafka_logs):
    """A broker-written segment, and a log of three parts (the last short), on each cloud
    and on an S3 bucket that encrypts with KMS."""
    s3, sse = by_url
    real = sorted((kafka_logs / "test_topic_a-0").glob("*.log"))[0]
    synthetic = segment_contents(real) | {SegmentFile.LOG: os.urandom(2 * PART + 12345)}
    for contents in (segment_contents(real), synthetic):
        metadata = replace(
            segment_metadata(real, topic="test_topic_a"),
            segment_size_in_bytes=len(contents[SegmentFile.LOG]),
        )
        before = s3.running.objects()
        upload = await start(s3, metadata, contents)
        assert upload.valid_for_ms == COPY_TIMEOUT_MS + UPLOAD_URL_MARGIN_S * 1000
        plan = [(p.part_number, p.size) for p in upload.log_parts]
        assert plan == [(p.part_number, p.size) for p in part_plan(contents[SegmentFile.LOG])]
        assert [p.position for p in upload.log_parts] == [i * PART for i in range(len(plan))]
        signed = {"x-amz-server-side-encryption": sse} if sse else {}
        assert dict(upload.indexes_headers) == signed | SIGNED_PUT_HEADERS[s3.running.backend]
        assert s3.running.objects() == before  # nothing is there until the caller PUTs it
        parts = await put_all(upload, contents)
        answer = await complete(s3, metadata, upload, contents, parts)
        assert b'"remote_size"' in answer.custom_metadata
        assert await read_back(s3.running.client, metadata) == contents
        assert s3.running.incomplete_uploads() == 0
    assert len(plan) == 3
    assert plan[-1][1] == 12345
    if s3.running.backend != "s3":
        return
    client = s3_client(s3.running.endpoint)
    bucket = s3.running.config.s3_bucket_name
    log_key = next(k for k in s3.running.objects() if k.endswith(".log"))
    head = client.head_object(Bucket=bucket, Key=log_key)
    stored = client.get_object(Bucket=bucket, Key=log_key)["Body"].read()
    if sse:
        # Every object of the copies is encrypted, and an ETag is no MD5 of its bytes.
        for key in s3.running.objects():
            assert client.head_object(Bucket=bucket, Key=key)["ServerSideEncryption"] == sse
        assert head["ETag"].strip('"') != hashlib.md5(stored).hexdigest()


async def test_a_url_puts_only_the_bytes_its_md5_was_signed_for(s3, kafka_logs):
    """Other bytes by a part's or the indexes' URL are refused by S3, with the MD5 signed
    or their own; so the indexes URL, valid after the copy, cannot change them."""
    real = sorted((kafka_logs / "test_topic_a-0").glob("*.log"))[0]
    contents = segment_contents(real)
    metadata = segment_metadata(real, topic="test_topic_a")
    upload = await start(s3, metadata, contents)
    part = upload.log_parts[0]
    signed_md5 = b64encode(hashlib.md5(contents[SegmentFile.LOG]).digest()).decode()
    other = b"not the log" * 100
    async with aiohttp.ClientSession() as session:
        assert await put(session, part.url, other, {"Content-MD5": signed_md5}) == 400
        assert await put(session, part.url, other) == 403  # its own MD5: not the signed one
        assert s3.running.incomplete_uploads() == 1
        await complete(s3, metadata, upload, contents, await put_all(upload, contents))
        committed = await read_back(s3.running.client, metadata)
        for tamper in ({"Content-MD5": signed_md5}, {}):
            assert await put(session, upload.indexes_url, other, tamper) in (400, 403)
    assert await read_back(s3.running.client, metadata) == committed == contents


@pytest.mark.parametrize("url_store", ["azure"], indirect=True)
async def test_an_azure_upload_sas_writes_its_blob_only_and_its_md5_is_checked(
    url_store, kafka_logs
):
    """No SAS signs bytes: Azure checks a block against the Content-MD5 sent with it, and a
    block's SAS is the one blob's, which no other blob's path takes."""
    real = sorted((kafka_logs / "test_topic_a-0").glob("*.log"))[0]
    contents = segment_contents(real)
    upload = await start(url_store, segment_metadata(real, topic="test_topic_a"), contents)
    part = upload.log_parts[0]
    signed_md5 = b64encode(hashlib.md5(contents[SegmentFile.LOG]).digest()).decode()
    other = b"not the log" * 100
    elsewhere = part.url.replace(".log?", ".other?", 1)
    assert elsewhere != part.url
    async with aiohttp.ClientSession() as session:
        assert await put(session, part.url, other, {"Content-MD5": signed_md5}) == 400
        assert await put(session, elsewhere, contents[SegmentFile.LOG]) == 403
    assert url_store.running.incomplete_uploads() == 0


async def test_what_did_not_arrive_as_sent_is_refused_and_leaves_nothing(url_store, kafka_logs):
    s3 = url_store
    real = sorted((kafka_logs / "test_topic_a-0").glob("*.log"))[0]
    contents = segment_contents(real) | {SegmentFile.LOG: os.urandom(PART + 10)}
    metadata = replace(
        segment_metadata(real, topic="test_topic_a"), segment_size_in_bytes=PART + 10
    )

    async def attempt(tamper, field, *, skip_indexes=False, parts_put=None):
        upload = await start(s3, metadata, contents)
        parts = await put_all(upload, contents, skip_indexes=skip_indexes)
        if parts_put is not None:  # the store holds only these
            await s3.rpc.AbortSegmentUpload(
                pb.AbortSegmentUploadRequest(
                    metadata=segment_metadata_to_proto(metadata), upload_id=upload.upload_id
                )
            )
            upload = await start(s3, metadata, contents)
            async with aiohttp.ClientSession() as session:
                log = contents[SegmentFile.LOG]
                for p in upload.log_parts[:parts_put]:
                    put_part = put(session, p.url, log[p.position : p.position + p.size])
                    assert await put_part in CREATED
                await put(session, upload.indexes_url, indexes_of(contents), upload.indexes_headers)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await complete(s3, metadata, upload, contents, tamper(parts))
        refused(caught.value, grpc.StatusCode.INVALID_ARGUMENT, field)
        # Discarded whole: no part, no indexes object, no manifest.
        assert (s3.running.objects(), s3.running.incomplete_uploads()) == ({}, 0)
        return caught.value.details()

    def other_size(parts):
        parts[0].size, parts[1].size = parts[0].size + 1, parts[1].size - 1
        return parts

    details = await attempt(other_size, "log_parts")
    assert f"part 1 was sent as {PART + 1} bytes, but the bucket holds {PART}" in details
    assert not [m for m in ("X-Amz-Signature", "X-Goog-Signature", "sig=") if m in details]
    details = await attempt(lambda parts: parts, "log_parts", parts_put=1)
    assert "part 2 was sent as 10 bytes, but the bucket holds nothing" in details
    await attempt(lambda parts: parts[:1], "log_parts")  # the log not whole
    details = await attempt(lambda parts: parts, "files", skip_indexes=True)
    assert "never PUT" in details

    # An upload the caller gives up on: aborted, nothing is left.
    upload = await start(s3, metadata, contents)
    await put_all(upload, contents)
    assert s3.running.incomplete_uploads() == 1
    request = pb.AbortSegmentUploadRequest(
        metadata=segment_metadata_to_proto(metadata), upload_id=upload.upload_id
    )
    await s3.rpc.AbortSegmentUpload(request)
    await s3.rpc.AbortSegmentUpload(request)  # idempotent
    assert (s3.running.objects(), s3.running.incomplete_uploads()) == ({}, 0)


async def test_bad_upload_requests_are_refused_naming_the_field(s3, tmp_path, s3_endpoint):
    contents = {f: b"x" * 10 for f in SegmentFile if f is not SegmentFile.TRANSACTION_INDEX}
    metadata = segment_metadata(size=10)
    cases = [
        (metadata, {}, COPY_TIMEOUT_MS, "files"),
        (
            replace(metadata, segment_size_in_bytes=11),
            contents,
            COPY_TIMEOUT_MS,
            "metadata.segment_size_in_bytes",
        ),
        (metadata, contents, 0, "copy_timeout_ms"),
        # Not shorter than the age at which the store aborts an upload as abandoned.
        (metadata, contents, 3_600_000, "copy_timeout_ms"),
        (
            replace(metadata, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
            contents,
            COPY_TIMEOUT_MS,
            "metadata.state",
        ),
    ]
    for segment, files, timeout_ms, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await start(s3, segment, files, timeout_ms)
        refused(caught.value, grpc.StatusCode.INVALID_ARGUMENT, field)

    # Plans of parts S3 would not take, or that do not cover the log.
    log = b"x" * (PART + 10)
    long = (replace(metadata, segment_size_in_bytes=len(log)), contents | {SegmentFile.LOG: log})
    first, last = part_plan(log)
    plans = [
        (part_plan(log, PART // 2), "log_parts.size"),  # below S3's smallest but the last
        ([last, first], "log_parts"),
        ([first, pb.UploadedPart(part_number=2, size=10, md5="not hex")], "log_parts.md5"),
        (part_plan(log[:-1]), "log_parts"),  # not the log whole
    ]
    for plan, field in plans:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await start(s3, *long, parts=plan)
        refused(caught.value, grpc.StatusCode.INVALID_ARGUMENT, field)
    assert s3.running.incomplete_uploads() == 0
    # A caller that states no MD5s (a plugin from before they were signed) takes the stream.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await start(s3, *long, parts=[])
    refused(caught.value, grpc.StatusCode.UNIMPLEMENTED)
    assert "log_parts" in caught.value.details()

    # A filesystem store signs nothing, nor does an S3 one told not to, nor one that
    # compresses new segments: the bytes a URL takes would be stored untransformed.
    for name, backend, extra, says in (
        ("filesystem", "filesystem", {}, "storage.s3.copy.urls.enabled"),
        ("off", "s3", {"storage.s3.copy.urls.enabled": "false"}, "storage.s3.copy.urls.enabled"),
        ("chunked", "s3", {"compression.enabled": "true"}, "compression.enabled"),
    ):
        (tmp_path / name).mkdir()
        unsigned = Stub(await start_store(backend, tmp_path / name, s3_endpoint, **extra))
        try:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await start(unsigned, metadata, contents)
            refused(caught.value, grpc.StatusCode.UNIMPLEMENTED)
            assert says in caught.value.details()
        finally:
            await unsigned.close()


def files_request(metadata, contents, paths, overrides=None) -> pb.CopyLogSegmentFilesRequest:
    """`paths` on disk (file -> path), the rest of `contents` inline."""
    request = pb.CopyLogSegmentFilesRequest(metadata=segment_metadata_to_proto(metadata))
    for file, data in contents.items():
        if file in paths:
            request.files.add(
                file=segment_file_to_proto(file),
                path=str(paths[file]),
                size=(overrides or {}).get(file, len(data)),
            )
        else:
            request.inline_files.add(file=segment_file_to_proto(file), position=0, data=data)
    return request


async def test_segments_copied_by_path_read_back_byte_for_byte(by_path, kafka_logs):
    for log in sorted((kafka_logs / "test_topic_a-0").glob("*.log")):
        metadata = segment_metadata(log, topic="test_topic_a")
        contents = segment_contents(log)
        files = segment_files(log)
        paths = {
            SegmentFile.LOG: log,
            SegmentFile.OFFSET_INDEX: files.offset_index,
            SegmentFile.TIME_INDEX: files.time_index,
        }
        if not isinstance(files.producer_snapshot_index, bytes):
            paths[SegmentFile.PRODUCER_SNAPSHOT] = files.producer_snapshot_index
        answer = await by_path.rpc.CopyLogSegmentFiles(files_request(metadata, contents, paths))
        assert b'"remote_size"' in answer.custom_metadata
        assert await read_back(by_path.running.client, metadata) == contents


async def test_bad_copies_by_path_are_refused_and_write_nothing(by_path, tmp_path, s3_endpoint):
    broker = tmp_path / "broker"
    partition = broker / "orders-0"  # segment_metadata's topic and partition
    partition.mkdir(parents=True)
    log = partition / "00000000000000000000.log"
    log.write_bytes(b"z" * 500)
    (partition / "00000000000000000000.index").write_bytes(b"i" * 8)
    outside = tmp_path / "elsewhere"
    (outside / "orders-0").mkdir(parents=True)
    (outside / "orders-0" / log.name).write_bytes(b"z" * 500)
    (broker / "__cluster_metadata-0").mkdir()
    (broker / "__cluster_metadata-0" / log.name).write_bytes(b"z" * 500)
    # A link in the partition directory, and a partition directory that is a link.
    (partition / "00000000000000000000.timeindex").symlink_to(outside / "orders-0" / log.name)
    (broker / "orders-1").symlink_to(outside / "orders-0")
    os.mkfifo(partition / "00000000000000000000.snapshot")
    contents = {f: b"i" * 8 for f in SegmentFile if f is not SegmentFile.TRANSACTION_INDEX}
    contents[SegmentFile.LOG] = b"z" * 500
    metadata = segment_metadata(size=500)
    other_partition = segment_metadata(size=500, partition=1)
    internal = segment_metadata(size=500, topic="__cluster_metadata")
    log_at = lambda path: {SegmentFile.LOG: path}  # noqa: E731
    cases = [
        (metadata, log_at(outside / "orders-0" / log.name), {}, "files.path", "not in a partition"),
        (metadata, log_at(broker / log.name), {}, "files.path", "not in a partition"),
        (metadata, log_at(f"{partition}/../orders-0/{log.name}"), {}, "files.path", "not a normal"),
        (metadata, log_at(f"orders-0/{log.name}"), {}, "files.path", "relative"),
        # A file of the partition's that is not this segment's, or not of its kind.
        (
            replace(metadata, start_offset=5),
            log_at(log),
            {},
            "files.path",
            "orders-0/00000000000000000005.log",
        ),
        (metadata, {SegmentFile.OFFSET_INDEX: log}, {}, "files.path", "not a file Kafka wrote"),
        (other_partition, log_at(log), {}, "files.path", "not a file Kafka wrote"),
        (metadata, log_at(partition / "00000000000000000000.timeindex"), {}, "files.path", ""),
        # Links are not followed below an allowed directory.
        (
            metadata,
            {SegmentFile.TIME_INDEX: partition / "00000000000000000000.timeindex"},
            {},
            "files.path",
            "cannot read",
        ),
        (other_partition, log_at(broker / "orders-1" / log.name), {}, "files.path", "cannot read"),
        (internal, log_at(broker / "__cluster_metadata-0" / log.name), {}, "metadata.topic", ""),
        (metadata, log_at(partition / "00000000000000000099.log"), {}, "files.path", ""),
        (
            metadata,
            {SegmentFile.PRODUCER_SNAPSHOT: partition / "00000000000000000000.snapshot"},
            {},
            "files.size",
            "not a regular file",
        ),
        (metadata, log_at(log), {SegmentFile.LOG: 501}, "files.size", "fewer than"),
        # Indexes are read whole: a size past the store's bound is refused before that.
        (
            metadata,
            {
                SegmentFile.LOG: log,
                SegmentFile.OFFSET_INDEX: partition / "00000000000000000000.index",
            },
            {SegmentFile.OFFSET_INDEX: 65 << 20},
            "files",
            "indexes exceed",
        ),
    ]
    for segment, paths, overrides, field, words in cases:
        request = files_request(segment, contents, paths, overrides)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await by_path.rpc.CopyLogSegmentFiles(request)
        refused(caught.value, grpc.StatusCode.INVALID_ARGUMENT, field)
        assert words in caught.value.details()
    # The same files, right: copied.
    await by_path.rpc.CopyLogSegmentFiles(files_request(metadata, contents, log_at(log)))
    assert await read_back(by_path.running.client, metadata) == contents
    await by_path.running.client.delete_log_segment_data(metadata)
    request = files_request(metadata, contents, {SegmentFile.LOG: log})
    request.inline_files.add(file=segment_file_to_proto(SegmentFile.LOG), data=b"z")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await by_path.rpc.CopyLogSegmentFiles(request)
    refused(caught.value, grpc.StatusCode.INVALID_ARGUMENT, "inline_files")
    assert (by_path.running.objects(), by_path.running.incomplete_uploads()) == ({}, 0)

    # A store allowed no directory reads no path.
    (tmp_path / "closed").mkdir()
    closed = Stub(await start_store(by_path.running.backend, tmp_path / "closed", s3_endpoint))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await closed.rpc.CopyLogSegmentFiles(
                files_request(metadata, contents, {SegmentFile.LOG: log})
            )
        refused(caught.value, grpc.StatusCode.UNIMPLEMENTED)
        assert "copy.paths.allowed" in caught.value.details()
    finally:
        await closed.close()


async def test_a_path_copy_into_a_compressing_store_is_stored_as_chunks(
    by_path, tmp_path, s3_endpoint
):
    """The store reads the files itself, so it transforms them as a stream's bytes."""
    partition = tmp_path / "broker" / "orders-0"
    partition.mkdir(parents=True)
    log = partition / f"{0:020d}.log"
    contents = {f: b"i" * 8 for f in SegmentFile if f is not SegmentFile.TRANSACTION_INDEX}
    contents[SegmentFile.LOG] = b"a record's bytes " * 20_000
    log.write_bytes(contents[SegmentFile.LOG])
    metadata = segment_metadata(size=len(contents[SegmentFile.LOG]))
    settings = {"copy.paths.allowed": str(tmp_path / "broker"), "compression.enabled": "true"}
    (tmp_path / "chunked").mkdir()
    chunked = Stub(
        await start_store(by_path.running.backend, tmp_path / "chunked", s3_endpoint, **settings)
    )
    try:
        await chunked.rpc.CopyLogSegmentFiles(
            files_request(metadata, contents, {SegmentFile.LOG: log})
        )
        assert await read_back(chunked.running.client, metadata) == contents
        key = SegmentKeys.of("", metadata)
        stored = await chunked.running.service.app.objects.get(key.log)
        assert len(stored) < len(contents[SegmentFile.LOG]) / 10
        manifest = Manifest.from_json(
            await chunked.running.service.app.objects.get(key.manifest), ""
        )
        assert manifest.transforms is not None
    finally:
        await chunked.close()


def encoded_as_told(metadata, contents, transforms: pb.UploadTransforms) -> Encoded:
    """The segment's objects encoded as PrepareSegmentUpload says, as the plugin does."""
    key, wrapped = None, transforms.wrapped_data_key
    if transforms.data_key:
        key = DataKey(transforms.data_key, wrapped.key_provider, wrapped.key_id, wrapped.wrapped)
    level = transforms.zstd_level if transforms.compression_enabled else None
    segment = metadata.remote_log_segment_id
    objects = []
    for kind, original in (
        (SegmentObjectKind.LOG, contents[SegmentFile.LOG]),
        (SegmentObjectKind.INDEXES, indexes_of(contents)),
    ):
        codec = ChunkCodec(segment.topic_id_partition.topic_id, segment.id, kind, level, key)
        objects.append(encode_chunks(codec, original, transforms.chunk_size))
    (log_index, log), (indexes_index, indexes) = objects
    chunks = pb.UploadedChunks(
        chunk_size=transforms.chunk_size,
        log_stored_sizes=log_index.stored_sizes,
        indexes_stored_sizes=indexes_index.stored_sizes,
        compressed=level is not None,
        wrapped_data_key=wrapped if key is not None else None,
    )
    return Encoded(b"".join(log), b"".join(indexes), chunks)


@pytest_asyncio.fixture(
    params=[("s3", False), ("s3", True), ("gcs", False), ("azure", True)],
    ids=["s3-compressed", "s3-encrypted-over-tls", "gcs-compressed", "azure-encrypted-over-tls"],
)
async def chunking_store(request, tmp_path, s3_endpoint, cloud_emulators):
    """A store that compresses new segments, with a raw stub of it; and one that also
    encrypts them, over TLS (where alone it hands out data keys)."""
    backend, encrypted = request.param
    settings = {"compression.enabled": "true", "chunk.size": str(CHUNK)}
    certificates = make_certificates(tmp_path) if encrypted else None
    if certificates is not None:
        settings |= local_ring(tmp_path, "k1") | server_tls_settings(certificates)
    running = await start_store(
        backend, tmp_path, s3_endpoint, emulators=cloud_emulators, **settings
    )
    stub = Stub(running, certificates)
    yield stub
    await stub.close()


async def test_a_url_copy_into_a_chunking_store_puts_the_chunks_the_caller_encoded(
    chunking_store, kafka_logs
):
    """The store tells the caller how to encode (a data key only over TLS); the caller PUTs
    stored chunks of parts planned on them; the segment reads back exactly, and the bucket
    holds the chunks as sent, under a version-2 manifest."""
    real = sorted((kafka_logs / "test_topic_a-0").glob("*.log"))[0]
    text = b"".join(b"order %08d shipped to warehouse 7\n" % i for i in range(200_000))
    contents = segment_contents(real) | {SegmentFile.LOG: os.urandom(6 * 1024 * 1024) + text}
    metadata = replace(
        segment_metadata(real, topic="test_topic_a"),
        segment_size_in_bytes=len(contents[SegmentFile.LOG]),
    )
    prepare = pb.PrepareSegmentUploadRequest(metadata=segment_metadata_to_proto(metadata))
    transforms = (await chunking_store.rpc.PrepareSegmentUpload(prepare)).transforms
    encrypted = chunking_store.certificates is not None
    assert (transforms.chunk_size, transforms.compression_enabled) == (CHUNK, True)
    assert len(transforms.data_key) == (32 if encrypted else 0)
    encoded = encoded_as_told(metadata, contents, transforms)
    assert len(encoded.log) < len(contents[SegmentFile.LOG]) * 0.7

    with pytest.raises(grpc.aio.AioRpcError) as caught:  # plain bytes into a chunking store
        await start(chunking_store, metadata, contents)
    refused(caught.value, grpc.StatusCode.UNIMPLEMENTED)
    assert "PrepareSegmentUpload" in caught.value.details()
    short = pb.UploadedChunks()
    short.CopyFrom(encoded.chunks)
    del short.log_stored_sizes[-1]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await start(chunking_store, metadata, contents, encoded=replace(encoded, chunks=short))
    refused(caught.value, grpc.StatusCode.INVALID_ARGUMENT, "chunks.log_stored_sizes")

    upload = await start(chunking_store, metadata, contents, encoded=encoded)
    assert sum(p.size for p in upload.log_parts) == len(encoded.log)
    assert len(upload.log_parts) == 2
    parts = await put_all(upload, contents, encoded=encoded)
    await complete(chunking_store, metadata, upload, contents, parts, encoded.chunks)
    assert await read_back(chunking_store.client, metadata) == contents
    keys = SegmentKeys.of("", metadata)
    objects = chunking_store.running.service.app.objects
    assert await objects.get(keys.log) == encoded.log
    assert await objects.get(keys.indexes) == encoded.indexes
    manifest = Manifest.from_json(await objects.get(keys.manifest), keys.manifest)
    assert manifest.transforms is not None
    assert manifest.transforms.log_chunks.stored_sizes == tuple(encoded.chunks.log_stored_sizes)
    assert (manifest.transforms.encryption is not None) == encrypted
    if encrypted:
        assert text[:4096] not in encoded.log


async def test_an_encrypting_store_without_tls_hands_out_no_data_key(tmp_path, s3_endpoint):
    stub = Stub(
        await start_store(
            "s3", tmp_path, s3_endpoint, **local_ring(tmp_path, "k1"), **{"chunk.size": str(CHUNK)}
        )
    )
    try:
        metadata = segment_metadata(size=100)
        prepare = pb.PrepareSegmentUploadRequest(metadata=segment_metadata_to_proto(metadata))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.rpc.PrepareSegmentUpload(prepare)
        refused(caught.value, grpc.StatusCode.UNIMPLEMENTED)
        assert "tls.cert.file is unset" in caught.value.details()
        assert stub.running.objects() == {}
    finally:
        await stub.close()


def open_descriptors_of(path) -> int:
    """How many of this process's descriptors are open on `path`."""
    target = str(path.resolve())
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") == target
    return count


@pytest.mark.parametrize("by_path", ["filesystem"], indirect=True)
async def test_a_copy_by_path_cancelled_while_it_opens_closes_what_it_opened(by_path, kafka_logs):
    """A copy cancelled (its caller gone) while a worker thread opens the broker's files:
    the thread's descriptors are closed once it is done, not left open."""
    log = sorted((kafka_logs / "test_topic_a-0").glob("*.log"))[0]
    metadata = segment_metadata(log, topic="test_topic_a")
    contents = segment_contents(log)
    direct = DirectCopies(by_path.running.service.app, allowed_paths=allowed_roots(str(kafka_logs)))
    files = {SegmentFile.LOG: LocalFile(str(log), len(contents[SegmentFile.LOG]))}
    inline = {f: data for f, data in contents.items() if f is not SegmentFile.LOG}
    cancelled = 0
    for turns in range(40):  # cancelled at each point of the open, from before it to after
        copy = asyncio.create_task(direct.copy_files(metadata, files, inline))
        for _ in range(turns % 8):
            await asyncio.sleep(0)
        copy.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await copy
        cancelled += copy.cancelled()
    assert cancelled > 0  # some were cut off, not all finished before the cancel
    closed = await eventually(lambda: open_descriptors_of(log) == 0, timeout_s=10)
    assert closed
