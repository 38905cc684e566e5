"""Object storage over a real link (support.s3_server's Link): a first-byte delay on each
request, one bandwidth cap each way, requests answered 503 SlowDown and GETs cut off
midway. The store copies and serves segments whole through it, on S3 and on GCS's and
Azure's emulators behind the same link, and the link's own counts show it did what it
was told."""

import os
import subprocess
import sys
import urllib.error
import urllib.request

import botocore.exceptions
import pytest
import pytest_asyncio
from support.s3 import s3_client
from support.servers import S3_SERVER, S3Server
from support.services import cloud_config, new_bucket, start_configured_store, start_store

from .segments import segment_metadata, synthetic_files

MIB = 1024 * 1024
# About every fifth request answered SlowDown, every fifth GET cut off.
FAULTY = {"first_byte_ms": 20, "bandwidth_mb_s": 50, "slow_down_fraction": 0.2}


@pytest.fixture(scope="module")
def linked_s3():
    server = S3Server(**FAULTY)
    yield server
    server.stop()


@pytest_asyncio.fixture(params=["s3", "gcs", "azure"])
async def over_the_link(request, tmp_path, linked_s3, cloud_emulators):
    """(the link, a store behind it) on each cloud backend."""
    backend = request.param
    link = linked_s3 if backend == "s3" else cloud_emulators.link(backend, **FAULTY)
    link.link("POST", **FAULTY, cut_fraction=0.2, seed=405)
    if backend == "s3":
        running = await start_store("s3", tmp_path, linked_s3.endpoint)
    else:
        config = cloud_config(backend, tmp_path, cloud_emulators, via=link)
        running = await start_configured_store(config)
    yield link, running
    await running.stop()
    if link is not linked_s3:
        link.stop()


async def test_a_segment_crosses_a_faulty_link_whole_both_ways(over_the_link):
    link, store = over_the_link
    data = os.urandom(11 * MIB)  # in parts: three, then completed
    metadata = segment_metadata(size=len(data))
    before = link.link()
    await store.client.copy_log_segment_data(metadata, synthetic_files(data))
    chunks = [c async for c in store.client.fetch_log_segment(metadata, 0, None)]
    assert b"".join(chunks) == data

    after = link.link()
    assert after["bytes_up"] - before["bytes_up"] >= len(data)
    assert after["bytes_down"] - before["bytes_down"] >= len(data)
    # The store met faults it was not told of, and retried past them.
    assert after["slowed_down"] > before["slowed_down"]


def test_each_fault_is_what_s3_answers(linked_s3):
    linked_s3.link("POST", first_byte_ms=0)
    client = s3_client(linked_s3.endpoint)
    bucket = new_bucket(linked_s3.endpoint)
    client.put_object(Bucket=bucket, Key="k", Body=b"x" * MIB)
    bare = s3_client(linked_s3.endpoint, retries=False)

    linked_s3.link("POST", first_byte_ms=0, slow_down_fraction=1)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        bare.get_object(Bucket=bucket, Key="k")
    assert refused.value.response["Error"]["Code"] == "SlowDown"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503

    linked_s3.link("POST", first_byte_ms=0, cut_fraction=1)
    body = bare.get_object(Bucket=bucket, Key="k")["Body"]
    with pytest.raises(botocore.exceptions.ResponseStreamingError):
        body.read()
    assert linked_s3.link()["cut"] == 1

    linked_s3.link("POST", first_byte_ms=0)
    assert bare.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x" * MIB
    counted = linked_s3.link()
    assert (counted["requests"], counted["slowed_down"], counted["cut"]) == (1, 0, 0)
    assert counted["bytes_down"] == MIB

    assert linked_s3.link("DELETE") is None
    assert linked_s3.link() is None


@pytest.mark.parametrize(
    ("settings", "named"),
    [({"cut_fraction": 2}, "cut_fraction"), ({"bandwidth_mb_s": -1}, "bandwidth_mb_s")],
)
def test_a_bad_setting_is_refused_by_name(linked_s3, settings, named):
    with pytest.raises(urllib.error.HTTPError) as refused:
        linked_s3.link("POST", **settings)
    assert refused.value.code == 400
    assert named in refused.value.read().decode()


def test_a_link_flag_without_link_is_refused():
    done = subprocess.run(
        [sys.executable, str(S3_SERVER), "--first-byte-ms", "50"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--first-byte-ms needs --link" in done.stderr


def test_a_ranged_get_answers_the_range_as_moto_does(linked_s3):
    """The server reads a signed ranged GET from the object's stored bytes (moto would
    copy the whole object first): the same bytes and headers, by header or presigned,
    and moto's own answer where the range starts past the end."""
    linked_s3.link("DELETE")
    client = s3_client(linked_s3.endpoint)
    bucket = new_bucket(linked_s3.endpoint)
    data = os.urandom(3 * MIB + 5)
    client.put_object(Bucket=bucket, Key="a/b=c.log", Body=data)
    for asked, first, last in (
        ("bytes=0-99", 0, 99),
        (f"bytes={MIB}-", MIB, len(data) - 1),
        (f"bytes={3 * MIB}-{4 * MIB}", 3 * MIB, len(data) - 1),
    ):
        answer = client.get_object(Bucket=bucket, Key="a/b=c.log", Range=asked)
        assert answer["Body"].read() == data[first : last + 1]
        assert answer["ContentRange"] == f"bytes {first}-{last}/{len(data)}"
        assert answer["ContentLength"] == last - first + 1
        assert answer["ETag"] == client.head_object(Bucket=bucket, Key="a/b=c.log")["ETag"]
    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "a/b=c.log"}, ExpiresIn=60
    )
    request = urllib.request.Request(url, headers={"Range": "bytes=7-9"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 206
        assert answer.read() == data[7:10]
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client.get_object(Bucket=bucket, Key="a/b=c.log", Range=f"bytes={len(data)}-")
    assert refused.value.response["Error"]["Code"] == "InvalidRange"


async def fetch_as_kafka_does(client, metadata, size: int, fetch_bytes: int) -> bytes:
    """The log read as Kafka reads it through FetchLogSegment: each fetch asks for the rest
    of the segment from where the last one stopped, takes `fetch_bytes` and closes."""
    got = bytearray()
    while len(got) < size:
        fetched = 0
        stream = client.fetch_log_segment(metadata, len(got), None)
        async for chunk in stream:
            got += chunk[: fetch_bytes - fetched]
            fetched += len(chunk)
            if fetched >= fetch_bytes:
                break
        await stream.aclose()
    return bytes(got)


@pytest.mark.parametrize("chunks_ahead", [8, 0])
async def test_fetches_like_kafkas_get_each_chunk_of_the_log_once(
    tmp_path, linked_s3, chunks_ahead
):
    linked_s3.link("POST", first_byte_ms=5, bandwidth_mb_s=200)
    store = await start_store(
        "s3",
        tmp_path,
        linked_s3.endpoint,
        **{"fetch.read.ahead.chunks": str(chunks_ahead), "fetch.chunk.size": str(64 * 1024)},
    )
    try:
        data = os.urandom(6 * MIB + 100)  # six chunks and a short one
        metadata = segment_metadata(size=len(data))
        await store.client.copy_log_segment_data(metadata, synthetic_files(data))
        before = linked_s3.link()
        # 600 KiB a fetch: 11 fetches.
        assert await fetch_as_kafka_does(store.client, metadata, len(data), 600 * 1024) == data
        after = linked_s3.link()
    finally:
        await store.stop()
    gets = after["requests"] - before["requests"]
    if chunks_ahead:
        # Each 1 MiB chunk by one ranged GET, and no byte twice.
        assert gets == 7
        assert after["bytes_down"] - before["bytes_down"] == len(data)
    else:
        assert gets == 11  # one GET to the segment's end for each fetch
