"""What reads that skip the store's stream share: by descriptor (its short circuit,
filesystem) and by URL (the GETs it signs, S3).

Either way the reader keeps what it was given (a descriptor, a URL) for the
next reads of the segment; those still check ranges as the store does, and
still see a segment deleted or copied again.
"""

import os

import pytest
import pytest_asyncio
from support.services import new_bucket, start_store

from remotelog.client import ClientOptions, SegmentStoreClient
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.errors import InvalidArgumentError, RemoteResourceNotFoundError

from .segments import segment_metadata, synthetic_files

OPTIONS = ClientOptions(timeout_s=10, backoff=ExponentialBackoff(initial_ms=20, max_ms=100))


@pytest_asyncio.fixture(params=["descriptor", "url"])
async def around(request, tmp_path, s3_endpoint, tmp_path_factory):
    """A store, and `reader`: a client whose reads skip the store's stream."""
    bucket = new_bucket(s3_endpoint)
    if request.param == "descriptor":
        socket_path = f"{tmp_path_factory.mktemp('sc', numbered=True)}/s.sock"
        if len(socket_path) > 100:  # unix socket paths are short
            pytest.skip("the temporary directory's path is too long for a unix socket")
        running = await start_store(
            "filesystem",
            tmp_path,
            s3_endpoint,
            bucket,
            **{"short.circuit.socket.path": socket_path},
        )
        reader = SegmentStoreClient(
            f"127.0.0.1:{running.service.port}", short_circuit_socket=socket_path, options=OPTIONS
        )
    else:
        running = await start_store(
            "s3", tmp_path, s3_endpoint, bucket, **{"storage.s3.fetch.url.expiry.ms": "600000"}
        )
        reader = SegmentStoreClient(
            f"127.0.0.1:{running.service.port}", fetch_urls=True, options=OPTIONS
        )
    running.reader = reader
    yield running
    await reader.close()
    await running.stop()


async def read(client, metadata, start=0, end=None) -> bytes:
    return b"".join([chunk async for chunk in client.fetch_log_segment(metadata, start, end)])


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 0, slice(0, 1)),
        (0, 2999, slice(0, 3000)),
        (2990, 10**9, slice(2990, 3000)),
        (1000, None, slice(1000, 3000)),
        (2999, None, slice(2999, 3000)),
    ],
)
async def test_ranges(around, start, end, expected):
    data = os.urandom(3000)
    metadata = segment_metadata(size=len(data))
    await around.client.copy_log_segment_data(metadata, synthetic_files(data))
    assert await read(around.reader, metadata, start, end) == data[expected]


@pytest.mark.parametrize(
    ("start", "end", "field"),
    [(-1, None, "start_position"), (10, 5, "end_position"), (3000, None, "start_position")],
)
async def test_bad_ranges_name_the_field_with_a_kept_handle(around, start, end, field):
    metadata = segment_metadata(size=3000)
    await around.client.copy_log_segment_data(metadata, synthetic_files(b"x" * 3000))
    assert await read(around.reader, metadata, 0, 9) == b"x" * 10  # its handle is kept
    with pytest.raises(InvalidArgumentError) as raised:
        await read(around.reader, metadata, start, end)
    assert raised.value.field == field


async def test_a_deleted_segment_read_with_a_kept_handle_is_not_found(around):
    metadata = segment_metadata(size=100)
    await around.client.copy_log_segment_data(metadata, synthetic_files(b"d" * 100))
    assert await read(around.reader, metadata) == b"d" * 100
    await around.client.delete_log_segment_data(metadata)
    with pytest.raises(RemoteResourceNotFoundError) as raised:
        await read(around.reader, metadata)
    assert raised.value.reason == "SEGMENT_NOT_FOUND"


async def test_a_segment_copied_again_is_read_anew_with_a_kept_handle(around):
    metadata = segment_metadata(size=100)
    await around.client.copy_log_segment_data(metadata, synthetic_files(b"1" * 100))
    assert await read(around.reader, metadata) == b"1" * 100
    # A retried copy of the same segment id replaces the object under its name.
    await around.client.copy_log_segment_data(metadata, synthetic_files(b"2" * 100))
    assert await read(around.reader, metadata) == b"2" * 100
