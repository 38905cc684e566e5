"""The ObjectStore contract, the same tests on each backend (filesystem, S3, GCS, Azure).

The segment store is written against `ObjectStore` alone; whatever it relies on
(S3's object semantics: whole or nothing, uploads invisible until complete,
idempotent deletes and aborts, sorted listings) is held here for every backend.
"""

import os

import pytest
import pytest_asyncio
from support.services import cloud_config, new_bucket, store_config
from support.waiting import eventually

from remotelog.core.errors import RemoteResourceNotFoundError
from remotelog.segmentstore.factory import open_backend

MIB = 1024 * 1024
# Over the test S3 part size (5 MiB): the upload takes the multipart path.
MULTIPART = 11 * MIB


@pytest_asyncio.fixture(params=["filesystem", "s3", "gcs", "azure"])
async def objects(request, tmp_path, s3_endpoint, cloud_emulators):
    if request.param in ("gcs", "azure"):
        config = cloud_config(request.param, tmp_path, cloud_emulators)
    else:
        bucket = new_bucket(s3_endpoint) if request.param == "s3" else ""
        config = store_config(request.param, tmp_path, s3_endpoint, bucket)
    backend = await open_backend(config, config.backoff())
    yield backend
    await backend.close()


async def listed(objects, prefix: str = "") -> dict[str, int]:
    return {o.key: o.size async for o in objects.list(prefix)}


async def incomplete(objects, prefix: str = "") -> list[str]:
    return [u.key async for u in objects.incomplete_uploads(prefix)]


async def read(objects, key: str, start: int, end: int | None, chunk_size: int) -> list[bytes]:
    return [bytes(c) async for c in objects.read(key, start, end, chunk_size)]


async def test_put_then_get_gives_the_bytes_and_a_second_put_replaces_them(objects):
    await objects.put("t/0/a", b"first")
    assert await objects.get("t/0/a") == b"first"
    await objects.put("t/0/a", b"second, longer")
    assert await objects.get("t/0/a") == b"second, longer"
    assert await listed(objects) == {"t/0/a": 14}


async def test_a_missing_object_is_not_found_for_get_and_read(objects):
    with pytest.raises(RemoteResourceNotFoundError):
        await objects.get("t/0/missing")
    with pytest.raises(RemoteResourceNotFoundError):
        await read(objects, "t/0/missing", 0, None, 1024)


@pytest.mark.parametrize(
    ("start", "end", "chunk_size"),
    [(0, None, 4096), (0, 9, 4096), (100, 5099, 1000), (7, None, 3000), (9999, None, 64)],
)
async def test_reads_give_the_inclusive_range_in_chunks_of_at_most_the_size(
    objects, start, end, chunk_size
):
    data = os.urandom(10_000)
    await objects.put("t/0/log", data)
    chunks = await read(objects, "t/0/log", start, end, chunk_size)
    assert b"".join(chunks) == data[start : None if end is None else end + 1]
    assert all(0 < len(c) <= chunk_size for c in chunks)


@pytest.mark.parametrize("size", [3000, MULTIPART])
async def test_an_upload_is_invisible_until_complete_then_whole(objects, size):
    data = os.urandom(size)
    upload = objects.open_upload("t/0/log")
    for position in range(0, size, MIB):
        await upload.write(data[position : position + MIB])
    assert await listed(objects) == {}
    assert await upload.complete() == size
    assert await listed(objects) == {"t/0/log": size}
    assert await objects.get("t/0/log") == data
    assert await incomplete(objects) == []


async def test_an_aborted_upload_leaves_nothing_and_abort_is_idempotent(objects):
    upload = objects.open_upload("t/0/log")
    await upload.write(os.urandom(MULTIPART - MIB))
    await upload.abort()
    await upload.abort()
    assert await listed(objects) == {}
    assert await incomplete(objects) == []
    with pytest.raises(RemoteResourceNotFoundError):
        await objects.get("t/0/log")


async def test_an_upload_left_open_is_listed_incomplete_until_aborted(objects):
    upload = objects.open_upload("t/0/orphan")
    await upload.write(os.urandom(MULTIPART - MIB))  # past one part, which is on its way
    await objects.put("t/1/done", b"x")

    async def listed_incomplete():
        return [u async for u in objects.incomplete_uploads("t/0/")]

    (found,) = await eventually(listed_incomplete)
    assert found.key == "t/0/orphan"
    assert await incomplete(objects, "t/1/") == []
    await objects.abort_upload(found)
    await objects.abort_upload(found)  # idempotent
    assert await incomplete(objects) == []
    assert await listed(objects) == {"t/1/done": 1}
    await upload.abort()


async def test_listing_is_sorted_by_key_and_filtered_by_prefix(objects):
    for key in ("b/1/z", "a/0/y", "b/1/a", "b/10/c", "c"):
        await objects.put(key, key.encode())
    assert [o.key async for o in objects.list("")] == ["a/0/y", "b/1/a", "b/1/z", "b/10/c", "c"]
    assert await listed(objects, "b/1/") == {"b/1/a": 5, "b/1/z": 5}
    assert await listed(objects, "d/") == {}


async def test_delete_removes_the_keys_and_keys_already_gone_are_not_an_error(objects):
    for key in ("t/0/a", "t/0/b", "t/0/c"):
        await objects.put(key, b"data")
    await objects.delete(["t/0/a", "t/0/never", "t/0/c"])
    assert await listed(objects) == {"t/0/b": 4}
    await objects.delete(["t/0/a", "t/0/b"])
    assert await listed(objects) == {}
    await objects.delete([])
