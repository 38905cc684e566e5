"""Segments stored compressed and encrypted (manifest version 2), on each backend with each
key provider: read back exactly, no record in the clear, keys rotated, faults named."""

import asyncio
import json
import random
import socket

import grpc
import pytest
import pytest_asyncio
from support.kms import aws_kms, kms_key
from support.s3 import s3_client
from support.services import new_bucket, start_store
from support.tls import make_certificates, server_tls_settings

from remotelog.cli.main import main
from remotelog.client import ClientOptions, IndexType, SegmentStoreClient
from remotelog.core.errors import (
    RemoteStorageError,
    RetriableRemoteStorageError,
    UnsupportedOperationError,
)
from remotelog.kafka.records import CompressionType, Record, build_batch
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.key_providers import new_key_file
from remotelog.segmentstore.layout import Manifest, SegmentKeys

from .segments import segment_files, segment_metadata, synthetic_files

CHUNK = 64 * 1024
TRANSFORMED = {
    "chunk.size": str(CHUNK),
    "compression.enabled": "true",
    "storage.filesystem.fetch.urls.enabled": "true",
}
INDEXES = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.PRODUCER_SNAPSHOT)


def local_ring(tmp_path, *key_ids: str) -> dict[str, str]:
    ring = tmp_path / "keys"
    for key_id in key_ids:
        new_key_file(ring, key_id)
    return {
        "encryption.key.provider": "local",
        "encryption.key.ring.dir": str(ring),
        "encryption.key.id": key_ids[-1],
    }


@pytest_asyncio.fixture(params=["filesystem-local", "s3-aws-kms"])
async def transformed(request, tmp_path, s3_endpoint):
    backend, _, provider = request.param.partition("-")
    keys = (
        local_ring(tmp_path, "k1")
        if provider == "local"
        else aws_kms(s3_endpoint, kms_key(s3_endpoint))
    )
    running = await start_store(backend, tmp_path, s3_endpoint, **TRANSFORMED, **keys)
    yield running, keys["encryption.key.id"]
    await running.stop()


async def fetch(store, metadata, start=0, end=None) -> bytes:
    return b"".join([c async for c in store.client.fetch_log_segment(metadata, start, end)])


async def manifest_of(store, metadata) -> Manifest:
    key = SegmentKeys.of("", metadata).manifest
    return Manifest.from_json(await store.service.app.objects.get(key), key)


async def stored_objects(store) -> dict[str, bytes]:
    objects = store.service.app.objects
    return {key: await objects.get(key) for key in store.objects()}


async def test_real_segments_read_back_exactly_and_no_record_lies_in_the_clear(
    transformed, kafka_logs
):
    store, key_id = transformed
    rng = random.Random(7)
    for log in sorted((kafka_logs / "timeindex_test").glob("*.log"))[:2]:
        metadata = segment_metadata(log, topic="timeindex_test")
        files = segment_files(log)
        original = log.read_bytes()
        custom = json.loads(await store.client.copy_log_segment_data(metadata, files))
        assert await fetch(store, metadata) == original
        for _ in range(8):  # ranges across and within chunks, to the last byte
            first = rng.randrange(len(original))
            last = min(len(original) - 1, first + rng.choice([0, 10, CHUNK, 3 * CHUNK + 5]))
            assert await fetch(store, metadata, first, last) == original[first : last + 1]
        for index, source in zip(
            INDEXES,
            (files.offset_index, files.time_index, files.producer_snapshot_index),
            strict=True,
        ):
            expected = source.read_bytes() if hasattr(source, "read_bytes") else source
            assert await store.client.fetch_index(metadata, index) == expected

        manifest = await manifest_of(store, metadata)
        transforms = manifest.transforms
        assert transforms is not None
        assert transforms.compression == "zstd"
        assert transforms.encryption is not None
        assert transforms.encryption.key_id == key_id
        assert transforms.log_chunks.original_size == len(original)
        assert len(transforms.log_chunks.stored_sizes) == -(-len(original) // CHUNK)
        # The copy reports what the bucket holds: text-like records shrink.
        assert custom["remote_size"] == manifest.remote_size < len(original) / 2
    for key, body in (await stored_objects(store)).items():
        if not key.endswith(".rsm-manifest"):
            assert b"kafkaVal-" not in body, key
            assert b"header1" not in body, key


async def test_no_url_or_descriptor_serves_a_chunked_segment(transformed):
    """Their bytes would be the stored chunks: the caller takes FetchLogSegment."""
    store, _ = transformed
    data = b"some record bytes " * 1000
    metadata = segment_metadata(size=len(data))
    await store.client.copy_log_segment_data(metadata, synthetic_files(data))
    app = store.service.app
    refusals = [app.log_segment_url(metadata)]
    if store.backend == "filesystem":
        refusals.append(app.open_log_segment(metadata, 0, None))
    for refusal in refusals:
        with pytest.raises(UnsupportedOperationError, match="manifest version 2"):
            await refusal
    assert await fetch(store, metadata, 5, 40) == data[5:41]


async def test_a_tampered_chunk_is_reported_by_segment_and_chunk_and_none_of_it_served(
    tmp_path, s3_endpoint
):
    store = await start_store(
        "filesystem", tmp_path, s3_endpoint, **TRANSFORMED, **local_ring(tmp_path, "k1")
    )
    try:
        data = random.Random(1).randbytes(4 * CHUNK)
        metadata = segment_metadata(size=len(data))
        await store.client.copy_log_segment_data(metadata, synthetic_files(data))
        manifest = await manifest_of(store, metadata)
        assert manifest.transforms is not None
        start, _ = manifest.transforms.log_chunks.stored_range(2, 2)
        path = store.service.app.objects.path(SegmentKeys.of("", metadata).log)
        stored = bytearray(path.read_bytes())
        stored[start + 40] ^= 0x01
        path.write_bytes(bytes(stored))

        got = bytearray()

        async def read_all() -> None:
            async for chunk in store.client.fetch_log_segment(metadata, 0, None):
                got.extend(chunk)

        with pytest.raises(RemoteStorageError) as failed:
            await read_all()
        segment_id = metadata.remote_log_segment_id.id
        assert f"segment {segment_id} log chunk 2: fails its authentication" in str(failed.value)
        assert len(got) <= 2 * CHUNK  # nothing of chunk 2
        assert bytes(got) == data[: len(got)]
        # The chunks before and after it still read.
        assert await fetch(store, metadata, 3 * CHUNK, 4 * CHUNK - 1) == data[3 * CHUNK :]
    finally:
        await store.stop()


async def test_keys_rotate_old_segments_still_open_and_a_missing_key_is_named(
    tmp_path, s3_endpoint
):
    """A plain segment, one under k1, then k2 made active: all three read, each
    encrypted one names its key; with k1 gone from the ring, its segment is refused by
    that name and the others still read."""
    bucket = new_bucket(s3_endpoint)
    segments = {}

    async def copy_and_read(settings, name):
        data = bytes([len(segments) + 1]) * (3 * CHUNK + 7)
        segments[name] = (segment_metadata(size=len(data)), data)
        store = await start_store("s3", tmp_path, s3_endpoint, bucket, **settings)
        try:
            await store.client.copy_log_segment_data(segments[name][0], synthetic_files(data))
            return {n: await fetch(store, m) for n, (m, _) in segments.items()}, store
        finally:
            await store.stop()

    await copy_and_read({}, "plain")
    await copy_and_read({**TRANSFORMED, **local_ring(tmp_path, "k1")}, "old")
    rotated = {**TRANSFORMED, **local_ring(tmp_path, "k2")}  # k1 stays in the ring
    read, store = await copy_and_read(rotated, "new")
    assert read == {name: data for name, (_, data) in segments.items()}
    objects = await open_backend(store.config, store.config.backoff())
    try:
        for name, key_id in (("old", "k1"), ("new", "k2")):
            key = SegmentKeys.of("", segments[name][0]).manifest
            encryption = Manifest.from_json(await objects.get(key), key).transforms.encryption
            assert encryption.key_id == key_id
    finally:
        await objects.close()

    (tmp_path / "keys" / "k1.key").unlink()
    lost = await start_store("s3", tmp_path, s3_endpoint, bucket, **rotated)
    try:
        for name in ("plain", "new"):
            assert await fetch(lost, segments[name][0]) == segments[name][1]
        with pytest.raises(RemoteStorageError, match="key k1 is not in the local key ring"):
            await fetch(lost, segments["old"][0])
    finally:
        await lost.stop()


async def test_a_kms_that_does_not_answer_fails_the_copy_retriably_and_writes_nothing(
    tmp_path, s3_endpoint
):
    """A KMS that takes the connection and never answers: the copy is UNAVAILABLE (Kafka
    copies again) within the caller's deadline, and the bucket holds nothing of it."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:  # never accepts
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        store = await start_store(
            "s3",
            tmp_path,
            s3_endpoint,
            **TRANSFORMED,
            **aws_kms(endpoint, "alias/remotelog"),
            **{"encryption.kms.timeout.ms": "300"},
        )
        client = SegmentStoreClient(
            f"127.0.0.1:{store.service.port}", options=ClientOptions(timeout_s=3)
        )
        try:
            data = b"x" * 1000
            metadata = segment_metadata(size=len(data))
            with pytest.raises(RetriableRemoteStorageError) as caught:
                await client.copy_log_segment_data(metadata, synthetic_files(data))
            assert caught.value.grpc_code == grpc.StatusCode.UNAVAILABLE
            assert "KMS key alias/remotelog: no answer" in str(caught.value)
            assert store.objects() == {}
            assert store.incomplete_uploads() == 0
        finally:
            await client.close()
            await store.stop()


async def test_rewrap_moves_data_keys_to_another_key_rewriting_only_manifests(
    transformed, tmp_path, s3_endpoint, capsys
):
    store, old_key = transformed
    local = store.config.encryption_key_provider == "local"
    target = "k2" if local else kms_key(s3_endpoint)
    if local:
        new_key_file(tmp_path / "keys", "k2")
    segments = [segment_metadata(size=3 * CHUNK) for _ in range(2)]
    for metadata in segments:
        await store.client.copy_log_segment_data(metadata, synthetic_files(b"r" * 3 * CHUNK))
    before = await stored_objects(store)

    async def rewrap(*flags: str) -> str:
        config = tmp_path / f"{store.backend}.properties"
        command = ["keys", "rewrap", "--config", str(config), "--to", target, *flags]
        assert await asyncio.to_thread(main, command) == 0
        return capsys.readouterr().out

    out = await rewrap("--dry-run")
    assert f"would re-wrap 2 data keys under {target}; 0 already under it" in out
    assert await stored_objects(store) == before
    out = await rewrap()
    assert f"re-wrapped 2 data keys under {target}; 0 already under it" in out
    after = await stored_objects(store)
    for key, body in before.items():
        if key.endswith(".rsm-manifest"):
            manifest = Manifest.from_json(after[key], key)
            assert manifest.transforms.encryption.key_id.endswith(target)
            assert Manifest.from_json(body, key).transforms.encryption.key_id == old_key
        else:
            assert after[key] == body, key  # not a byte of a chunk rewritten
    assert "re-wrapped 0 data keys" in await rewrap()  # a second run finds nothing to do

    if local:  # the old key retired: a store started afresh opens them by the new one
        (tmp_path / "keys" / f"{old_key}.key").unlink()
    keys = {
        "encryption.key.provider": store.config.encryption_key_provider,
        "encryption.key.ring.dir": str(tmp_path / "keys"),
        "encryption.kms.endpoint.url": s3_endpoint,
        "encryption.key.id": target,
    }
    (tmp_path / "reader").mkdir()
    reader = await start_store(
        store.backend,
        tmp_path / "reader",
        s3_endpoint,
        store.config.s3_bucket_name,
        **TRANSFORMED,
        **keys,
        **{"storage.root": store.config.storage_root},
    )
    try:
        for metadata in segments:
            assert await fetch(reader, metadata) == b"r" * 3 * CHUNK
    finally:
        await reader.stop()


def batches_of(codec: CompressionType, count: int = 400) -> bytes:
    """A log of `count` batches of ten text records each, compressed by `codec`."""
    return b"".join(
        build_batch(
            [
                Record(10 * n + i, 1_700_000_000_000, None, b'{"order": %d, "ok": true}' % i)
                for i in range(10)
            ],
            compression=codec,
        )
        for n in range(count)
    )


async def test_only_segments_kafka_did_not_compress_are_compressed(tmp_path, s3_endpoint):
    """zstd over a segment of lz4 batches would spend CPU for nothing: its chunks are
    stored as they are (still encrypted); a plain segment's are compressed. Without a
    key provider nothing is encrypted, and an encrypted segment is refused by its key."""
    store = await start_store(
        "filesystem", tmp_path, s3_endpoint, **TRANSFORMED, **local_ring(tmp_path, "k1")
    )
    try:
        for codec, compression in ((CompressionType.LZ4, None), (CompressionType.NONE, "zstd")):
            log = batches_of(codec)
            metadata = segment_metadata(size=len(log))
            await store.client.copy_log_segment_data(metadata, synthetic_files(log))
            transforms = (await manifest_of(store, metadata)).transforms
            assert transforms.compression == compression, codec
            assert transforms.encryption is not None
            assert await fetch(store, metadata) == log
        encrypted = metadata
    finally:
        await store.stop()

    (tmp_path / "plain").mkdir()
    compressing = await start_store(
        "filesystem",
        tmp_path / "plain",
        s3_endpoint,
        **TRANSFORMED,
        **{"storage.root": store.config.storage_root},
    )
    try:
        log = batches_of(CompressionType.NONE)
        metadata = segment_metadata(size=len(log))
        await compressing.client.copy_log_segment_data(metadata, synthetic_files(log))
        transforms = (await manifest_of(compressing, metadata)).transforms
        assert transforms.compression == "zstd"
        assert transforms.encryption is None
        assert await fetch(compressing, metadata) == log
        with pytest.raises(
            RemoteStorageError,
            match=r"under key k1 of key provider local.*encryption\.key\.provider",
        ):
            await fetch(compressing, encrypted)
    finally:
        await compressing.stop()


async def test_a_chunked_segment_leaves_the_others_read_by_url(tmp_path, s3_endpoint):
    """A bucket of plain and encrypted segments, as after encryption is turned on, and a
    store without TLS: it hands no data key out, so it has no URL for an encrypted
    segment (of that segment only, naming the setting), and the client still reads the
    plain ones by theirs (they read after the store is gone)."""
    bucket, urls = new_bucket(s3_endpoint), {"storage.s3.fetch.url.expiry.ms": "600000"}
    plain_log, sealed_log = b"p" * 200_000, b"c" * 200_000
    plain, sealed = segment_metadata(size=len(plain_log)), segment_metadata(size=len(sealed_log))
    before = await start_store("s3", tmp_path, s3_endpoint, bucket, **urls)
    await before.client.copy_log_segment_data(plain, synthetic_files(plain_log))
    await before.stop()
    keys = local_ring(tmp_path, "k1")
    store = await start_store("s3", tmp_path, s3_endpoint, bucket, **urls, **TRANSFORMED, **keys)
    client = SegmentStoreClient(
        f"127.0.0.1:{store.service.port}", fetch_urls=True, options=ClientOptions(timeout_s=5)
    )
    try:
        await store.client.copy_log_segment_data(sealed, synthetic_files(sealed_log))
        with pytest.raises(UnsupportedOperationError, match=r"tls\.cert\.file is unset"):
            await store.service.app.log_segment_url(sealed, chunks_accepted=True)
        assert await read_by(client, sealed) == sealed_log  # through the store's stream
        assert await read_by(client, plain) == plain_log
        await store.stop()
        assert await read_by(client, plain, 10, 99) == plain_log[10:100]  # by its URL
    finally:
        await client.close()


async def read_by(client, metadata, start=0, end=None) -> bytes:
    return b"".join([c async for c in client.fetch_log_segment(metadata, start, end)])


async def test_over_tls_a_reader_decodes_a_sealed_segment_read_by_url(tmp_path, s3_endpoint):
    """Over TLS the store hands the reader the segment's chunk index and data key with
    its URL: every range reads by URL and is decoded by the reader (it reads after the
    store is gone), and a chunk altered in the bucket is refused, not served."""
    certificates = make_certificates(tmp_path)
    store = await start_store(
        "s3",
        tmp_path,
        s3_endpoint,
        **{"storage.s3.fetch.url.expiry.ms": "600000"},
        **TRANSFORMED,
        **local_ring(tmp_path, "k1"),
        **server_tls_settings(certificates),
    )
    tls = ClientOptions(
        timeout_s=5,
        tls_root_certs_file=str(certificates.ca),
        tls_cert_file=str(certificates.client_cert),
        tls_key_file=str(certificates.client_key),
    )
    client = SegmentStoreClient(f"localhost:{store.service.port}", fetch_urls=True, options=tls)
    try:
        log = random.Random(5).randbytes(3 * CHUNK) + b"t" * 5000
        metadata = segment_metadata(size=len(log))
        await client.copy_log_segment_data(metadata, synthetic_files(log))
        assert await read_by(client, metadata) == log
        await store.stop()
        for first, last in ((0, 0), (CHUNK - 3, CHUNK + 3), (len(log) - 10, len(log) - 1)):
            assert await read_by(client, metadata, first, last) == log[first : last + 1]
        # A byte of chunk 1 altered in the bucket: the reader refuses the chunk by name.
        bucket, key = store.config.s3_bucket_name, SegmentKeys.of("", metadata).log
        s3 = s3_client(s3_endpoint)
        stored = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        stored[CHUNK + 100] ^= 1
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(stored))
        with pytest.raises(RemoteStorageError, match="log chunk 1: fails its authentication"):
            await read_by(client, metadata, CHUNK, CHUNK + 10)
    finally:
        await client.close()
