"""Fetches by URL: the S3 store signs a GET of the log, the client reads S3 itself (or,
from a filesystem store on the same host, the file).

A client's URL is kept per segment, so once it has one, its reads reach S3
without the store: the tests stop the store and read on, which only a read by
URL can do.
"""

import contextlib
import json
import os
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import pytest_asyncio
from support.services import start_store

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.client import ClientOptions, SegmentStoreClient
from remotelog.client.log_readers import UrlLogReader
from remotelog.client.url_reader import UrlReader, UrlReadUnavailable
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import (
    InvalidArgumentError,
    ServiceUnavailableError,
    UnsupportedOperationError,
)
from remotelog.core.model import IndexType
from remotelog.dev.broker import free_port
from remotelog.fileio.url_cache import SignedUrlCache
from remotelog.protocol.convert import segment_metadata_to_proto

from .conftest import URLS_ON
from .segments import segment_files, segment_metadata, synthetic_files

MIB = 1024 * 1024
OPTIONS = ClientOptions(timeout_s=10, backoff=ExponentialBackoff(initial_ms=20, max_ms=100))


@contextlib.asynccontextmanager
async def url_client(running):
    """A client of `running` that reads segments by the URLs the store signs."""
    client = SegmentStoreClient(
        f"127.0.0.1:{running.service.port}", fetch_urls=True, options=OPTIONS
    )
    try:
        yield client
    finally:
        await client.close()


@pytest_asyncio.fixture(params=["s3", "gcs", "azure"])
async def signing_store(request, tmp_path, s3_endpoint, s3_faults, cloud_emulators):
    """The service on each cloud backend, signing fetch URLs (V4 for S3 and GCS, a SAS
    for Azure)."""
    running = await start_store(
        request.param, tmp_path, s3_endpoint, emulators=cloud_emulators, **URLS_ON
    )
    yield running
    s3_faults(None)
    await running.stop()


@pytest_asyncio.fixture
async def by_url(s3_store):
    async with url_client(s3_store) as client:
        yield client


async def read(client, metadata, start=0, end=None) -> bytes:
    return b"".join([chunk async for chunk in client.fetch_log_segment(metadata, start, end)])


async def manifest_cached(running, metadata) -> None:
    """The store reads a segment's manifest once for its URLs (where its indexes lie),
    then keeps it: after this, the next GET to S3 is a client's by URL."""
    await running.client.get_log_segment_url(metadata)


def pending_faults(s3_endpoint) -> list:
    with urllib.request.urlopen(f"{s3_endpoint}/__faults__", timeout=5) as response:
        return json.loads(response.read())


async def test_real_segments_read_by_url_without_the_store(signing_store, kafka_logs):
    logs = sorted((kafka_logs / "test_topic_a-0").glob("*.log"))
    copied = []
    async with url_client(signing_store) as by_url:
        for log in logs:
            metadata = segment_metadata(log, topic="test_topic_a")
            await signing_store.client.copy_log_segment_data(metadata, segment_files(log))
            assert await read(by_url, metadata) == log.read_bytes()
            copied.append((metadata, log.read_bytes()))
        await signing_store.service.stop(1)
        # The store is gone; the URLs it signed still read every byte, any range.
        for metadata, data in copied:
            assert await read(by_url, metadata) == data
            middle = len(data) // 2
            assert await read(by_url, metadata, middle, middle + 99) == data[middle:][:100]
        with pytest.raises(ServiceUnavailableError):  # and nothing else is served
            await by_url.delete_log_segment_data(copied[0][0], timeout_s=0.5)


async def test_a_refused_url_is_replaced_once_then_the_store_reads(s3_store, by_url, s3_faults):
    data = os.urandom(5000)
    metadata = segment_metadata(size=len(data))
    await s3_store.client.copy_log_segment_data(metadata, synthetic_files(data))
    await manifest_cached(s3_store, metadata)
    s3_faults("403", count=1, method="GET")  # the URL's GET; a new URL reads
    assert await read(by_url, metadata, 7) == data[7:]
    assert pending_faults(s3_store.endpoint) == []
    other = segment_metadata(size=len(data))
    await s3_store.client.copy_log_segment_data(other, synthetic_files(data))
    await manifest_cached(s3_store, other)
    # Refused twice (a clock or credentials at fault): the store's own GET reads it.
    s3_faults("403", count=2, method="GET")
    assert await read(by_url, other, 7) == data[7:]
    assert pending_faults(s3_store.endpoint) == []


async def test_a_read_cut_off_goes_on_through_the_store_from_where_it_was(
    s3_store, by_url, s3_faults
):
    data = os.urandom(9 * MIB)  # the cut comes after the first 4 MiB chunk was delivered
    metadata = segment_metadata(size=len(data))
    await s3_store.client.copy_log_segment_data(metadata, synthetic_files(data))
    await manifest_cached(s3_store, metadata)
    s3_faults("truncate", count=1, method="GET")
    received = []
    async for chunk in by_url.fetch_log_segment(metadata, 0):
        received.append(bytes(chunk))
    assert b"".join(received) == data
    assert len(received[0]) == 4 * MIB  # by URL, before the cut
    assert pending_faults(s3_store.endpoint) == []


async def test_a_store_without_urls_is_read_through_its_stream(tmp_path, s3_endpoint):
    for backend in ("filesystem", "s3"):  # s3 with storage.s3.fetch.url.expiry.ms=0
        (tmp_path / backend).mkdir()
        no_urls = {"storage.s3.fetch.url.expiry.ms": "0"}
        running = await start_store(backend, tmp_path / backend, s3_endpoint, **no_urls)
        try:
            data = os.urandom(3000)
            metadata = segment_metadata(size=len(data))
            await running.client.copy_log_segment_data(metadata, synthetic_files(data))
            with pytest.raises(UnsupportedOperationError):
                await running.client.get_log_segment_url(metadata)
            async with url_client(running) as by_url:
                assert await read(by_url, metadata, 5) == data[5:]
                assert await read(by_url, metadata, 0, 9) == data[:10]
        finally:
            await running.stop()


async def test_bad_metadata_for_a_url_is_invalid_argument(s3_store):
    metadata = segment_metadata_to_proto(segment_metadata(size=100))
    metadata.remote_log_segment_id.topic_id_partition.topic = "../../etc"
    stub = pb_grpc.SegmentStoreServiceStub(s3_store.client.channel)
    request = pb.GetLogSegmentUrlRequest(remote_log_segment_metadata=metadata)
    with pytest.raises(InvalidArgumentError) as raised:
        await s3_store.client.call_unary(stub.GetLogSegmentUrl, request)
    assert raised.value.field.startswith("remote_log_segment_metadata")


async def test_an_unreachable_url_is_unavailable_not_an_error():
    port = free_port()
    reader = UrlReader()
    reads = reader.read(f"http://127.0.0.1:{port}/b/k", 0, 9, what="k", timeout_s=5)
    try:
        with pytest.raises(UrlReadUnavailable, match="k: ClientConnectorError"):
            await anext(reads)
    finally:
        await reader.close()


def test_urls_are_given_up_before_they_expire(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("remotelog.fileio.url_cache.time.monotonic", lambda: now[0])
    urls: SignedUrlCache[str, str] = SignedUrlCache(max_entries=2)
    urls.keep("a", "https://a", valid_for_s=600)  # used for 570 s (30 s margin)
    urls.keep("b", "https://b", valid_for_s=10)  # shorter than two margins: the first half
    now[0] += 4.9
    assert (urls.get("a"), urls.get("b")) == ("https://a", "https://b")
    now[0] += 0.2
    assert urls.get("b") is None
    now[0] += 564
    assert urls.get("a") == "https://a"
    now[0] += 1
    assert urls.get("a") is None
    for key in "xyz":  # the least recently used goes beyond max_entries
        urls.keep(key, f"https://{key}", valid_for_s=600)
    assert [urls.get(k) for k in "xyz"] == [None, "https://y", "https://z"]


async def test_a_filesystem_store_on_this_host_hands_out_file_urls(tmp_path, s3_endpoint):
    running = await start_store(
        "filesystem", tmp_path, s3_endpoint, **{"storage.filesystem.fetch.urls.enabled": "true"}
    )
    try:
        data = os.urandom(9 * MIB + 5)
        metadata = segment_metadata(size=len(data))
        await running.client.copy_log_segment_data(metadata, synthetic_files(data))
        signed = await running.client.get_log_segment_url(metadata)
        url, valid_for_s = signed.url, signed.valid_for_s
        path = Path(urllib.parse.urlparse(url).path)
        assert url.startswith("file:///")
        assert path.is_relative_to(tmp_path)
        assert path.read_bytes() == data
        assert valid_for_s == 3600
        # And the indexes: each where the answer says, as FetchIndex serves it.
        stub = pb_grpc.SegmentStoreServiceStub(running.client.channel)
        answer = await running.client.call_unary(
            stub.GetLogSegmentUrl,
            pb.GetLogSegmentUrlRequest(
                remote_log_segment_metadata=segment_metadata_to_proto(metadata)
            ),
        )
        indexes = Path(urllib.parse.urlparse(answer.indexes_url).path).read_bytes()
        ranges = {IndexType(r.index_type): (r.position, r.size) for r in answer.index_ranges}
        assert set(ranges) == set(IndexType) - {IndexType.TRANSACTION}  # it has none
        for index_type, (position, size) in ranges.items():
            served = await running.client.fetch_index(metadata, index_type)
            assert indexes[position : position + size] == served
        async with url_client(running) as by_url:
            assert await read(by_url, metadata) == data
            await running.service.stop(1)
            # Read from the file, so without the store, any range.
            assert (
                await read(by_url, metadata, 4 * MIB - 3, 8 * MIB)
                == data[4 * MIB - 3 :][: 4 * MIB + 4]
            )
    finally:
        await running.stop()


async def test_a_file_url_this_host_cannot_read_leaves_the_read_to_the_store(tmp_path, s3_endpoint):
    """A missing file says nothing (another host's path, or a segment gone): the
    store's stream reads it, or answers SEGMENT_NOT_FOUND."""
    running = await start_store(
        "filesystem", tmp_path, s3_endpoint, **{"storage.filesystem.fetch.urls.enabled": "true"}
    )
    try:
        data = os.urandom(3000)
        metadata = segment_metadata(size=len(data))
        await running.client.copy_log_segment_data(metadata, synthetic_files(data))
        async with url_client(running) as by_url:
            (urls,) = [r for r in by_url._log_readers if isinstance(r, UrlLogReader)]
            urls._urls.keep(metadata.remote_log_segment_id, ("file:///nowhere/x.log", None), 600)
            assert await read(by_url, metadata, 5) == data[5:]
    finally:
        await running.stop()
    reader = UrlReader()
    reads = reader.read("file:///nowhere/x.log", 0, 9, what="k", timeout_s=5)
    with pytest.raises(UrlReadUnavailable, match="k: FileNotFoundError"):
        await anext(reads)
