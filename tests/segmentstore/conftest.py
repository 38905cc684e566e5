"""Segment store fixtures: the service on each backend (helpers in support.services)."""

import tempfile
from pathlib import Path

import pytest
import pytest_asyncio
from support.services import new_bucket, start_store, store_config

from remotelog.segmentstore.factory import open_segment_store

# Stores that sign fetch URLs (S3 only; the filesystem backend ignores it).
URLS_ON = {"storage.s3.fetch.url.expiry.ms": "600000"}


@pytest_asyncio.fixture(params=["filesystem", "s3", "gcs", "azure"])
async def store(request, tmp_path, s3_endpoint, s3_faults, cloud_emulators):
    """The service on each backend: every contract test runs against each."""
    running = await start_store(request.param, tmp_path, s3_endpoint, emulators=cloud_emulators)
    yield running
    s3_faults(None)
    await running.stop()


@pytest_asyncio.fixture
async def s3_store(tmp_path, s3_endpoint, s3_faults):
    """The service on S3 only, signing fetch URLs: for S3's faults and its URLs."""
    running = await start_store("s3", tmp_path, s3_endpoint, **URLS_ON)
    yield running
    s3_faults(None)
    await running.stop()


@pytest_asyncio.fixture
async def s3_objects(tmp_path, s3_endpoint):
    """The store's S3 backend alone, on a new bucket (`.bucket`), without the service."""
    config = store_config("s3", tmp_path, s3_endpoint, new_bucket(s3_endpoint))
    objects = (await open_segment_store(config, config.backoff())).objects
    yield objects
    await objects.close()


@pytest.fixture
def socket_dir():
    # Unix socket paths are short (108 bytes); pytest's tmp_path may not be.
    with tempfile.TemporaryDirectory(prefix="rl-") as directory:
        yield Path(directory)
