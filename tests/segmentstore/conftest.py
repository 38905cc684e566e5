"""Segment store fixtures: the service on each backend (helpers in support.services)."""

import socket
import tempfile
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from support.s3 import s3_client
from support.services import start_store


@pytest.fixture
def s3_bucket(s3_endpoint) -> str:
    name = f"remotelog-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest_asyncio.fixture(params=["filesystem", "s3"])
async def store(request, tmp_path, s3_endpoint, s3_faults):
    """The service on each backend: every contract test runs against both."""
    bucket = f"remotelog-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    running = await start_store(request.param, tmp_path, s3_endpoint, bucket)
    yield running
    s3_faults(None)
    await running.client.close()
    await running.service.stop(1)


@pytest.fixture
def socket_dir():
    # Unix socket paths are short (108 bytes); pytest's tmp_path may not be.
    with tempfile.TemporaryDirectory(prefix="rl-") as directory:
        yield Path(directory)


def free_port() -> int:
    """A loopback port nothing listens on (a client's dead gRPC side)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
