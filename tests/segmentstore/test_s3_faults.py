"""S3 faults (throttling, 5xx, dropped and cut-off connections) through a real moto server."""

import asyncio
import os

import grpc
import pytest
from support.s3 import s3_client, sent_requests
from support.waiting import eventually

from remotelog.client import ClientOptions, IndexType, SegmentStoreClient
from remotelog.core.errors import RemoteStorageError, RetriableRemoteStorageError

from .segments import segment_metadata, synthetic_files

MIB = 1024 * 1024


async def fetch(client, metadata, start=0, end=None):
    return b"".join([c async for c in client.fetch_log_segment(metadata, start, end)])


@pytest.mark.parametrize("mode", ["503", "500", "drop"])
async def test_copy_is_retried_through_faults(s3_store, s3_faults, mode):
    data = os.urandom(11 * MIB)  # multipart: create, three parts, complete
    metadata = segment_metadata(size=len(data))
    s3_faults(mode, count=3, method="PUT")
    await s3_store.client.copy_log_segment_data(metadata, synthetic_files(data))
    s3_faults(None)
    assert await fetch(s3_store.client, metadata) == data
    assert s3_store.incomplete_uploads() == 0


@pytest.mark.parametrize("mode", ["503", "500", "drop", "truncate"])
async def test_fetch_is_retried_through_faults(s3_store, s3_faults, mode):
    data = os.urandom(3 * MIB)
    metadata = segment_metadata(size=len(data))
    await s3_store.client.copy_log_segment_data(metadata, synthetic_files(data, txn=b"t" * 9))
    s3_faults(mode, count=2, method="GET")
    assert await fetch(s3_store.client, metadata, 100) == data[100:]
    s3_faults(mode, count=2, method="GET")
    assert await s3_store.client.fetch_index(metadata, IndexType.TRANSACTION) == b"t" * 9


async def test_outage_longer_than_the_deadline_is_unavailable(s3_store, s3_faults):
    data = os.urandom(1000)
    metadata = segment_metadata(size=len(data))
    await s3_store.client.copy_log_segment_data(metadata, synthetic_files(data))
    s3_faults("503", count=10_000, method="GET")
    client = SegmentStoreClient(
        f"127.0.0.1:{s3_store.service.port}", options=ClientOptions(timeout_s=1.5)
    )
    try:
        with pytest.raises(RetriableRemoteStorageError) as caught:
            await fetch(client, metadata)
        assert caught.value.grpc_code == grpc.StatusCode.UNAVAILABLE
        assert "SlowDown" in str(caught.value)
    finally:
        await client.close()
    s3_faults(None)
    assert await fetch(s3_store.client, metadata) == data  # and it recovers


async def test_failed_multipart_copy_is_aborted(s3_store, s3_faults):
    data = os.urandom(11 * MIB)
    metadata = segment_metadata(size=len(data))
    s3_faults("500", count=10_000, method="PUT")
    client = SegmentStoreClient(
        f"127.0.0.1:{s3_store.service.port}", options=ClientOptions(timeout_s=1.5)
    )
    try:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - UNAVAILABLE or DEADLINE_EXCEEDED
            await client.copy_log_segment_data(metadata, synthetic_files(data))
        assert caught.value.grpc_code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        )
    finally:
        await client.close()
    s3_faults(None)
    # The server aborts once its own deadline has passed.
    await eventually(lambda: s3_store.incomplete_uploads() == 0)
    assert s3_store.objects(metadata.topic_id_partition.topic) == {}
    assert s3_store.incomplete_uploads() == 0


async def test_a_call_after_close_fails_and_opens_no_session(s3_objects, s3_endpoint):
    """A late call (a cancelled handler's abort) must not reopen the closed client: it
    would open an HTTP session nobody closes, reported by the loop at this test's end."""
    objects = s3_objects
    await objects.put("t/0/early", b"x")
    await objects.close()
    with pytest.raises(RemoteStorageError, match="the store is closed"):
        await objects.put("t/0/late", b"y")
    await objects.close()  # again: nothing to do
    listed = s3_client(s3_endpoint).list_objects_v2(Bucket=objects.bucket)
    assert [o["Key"] for o in listed["Contents"]] == ["t/0/early"]


async def test_uploaded_bodies_reach_the_wire_as_the_bytes_given(s3_objects, s3_endpoint):
    """A PUT's and a part's body is sent as the bytes object itself, not wrapped in a
    file object that the checksum, the signature and aiohttp would each copy."""
    objects = s3_objects
    sent = sent_requests(objects)
    single = os.urandom(1000)
    await objects.put("t/0/single", single)
    upload = objects.open_upload("t/0/multi")
    parts = os.urandom(objects.settings.part_size + 10)
    await upload.write(parts)
    await upload.complete()
    bodies = [request.body for request in sent if request.body]
    assert sent[0].body is single
    assert [type(body) for body in bodies] == [bytes, bytes, bytes, bytes]
    assert b"".join(bodies[1:3]) == parts  # the two parts, in order
    client = s3_client(s3_endpoint)
    assert client.get_object(Bucket=objects.bucket, Key="t/0/single")["Body"].read() == single
    assert client.get_object(Bucket=objects.bucket, Key="t/0/multi")["Body"].read() == parts


async def test_an_upload_cancelled_while_s3_makes_it_is_still_aborted(
    s3_objects, s3_faults, s3_endpoint
):
    """CreateMultipartUpload reaches S3, but its caller is cancelled before the answer:
    abort waits for the answer and aborts that upload, which would otherwise be kept
    (and billed) until a scrub finds it."""
    objects = s3_objects
    s3_faults("slow", count=1, method="POST", delay_ms=1000)  # POST ?uploads
    upload = objects.open_upload("t/0/segment.log")
    writing = asyncio.create_task(upload.write(os.urandom(objects.settings.part_size + 10)))
    await asyncio.sleep(0.3)  # the request is at the server, waiting out its delay
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    await upload.abort()
    await asyncio.sleep(1.0)  # past the delay, where an unknown upload would have appeared
    uploads = s3_client(s3_endpoint).list_multipart_uploads(Bucket=objects.bucket)
    assert uploads.get("Uploads", []) == []
