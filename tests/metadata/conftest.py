"""Metadata manager fixtures (helpers in support.services; the broker is a session fixture)."""

import pytest_asyncio
from support.services import metadata_config, start_metadata


@pytest_asyncio.fixture
async def metadata(tmp_path, broker):
    running = await start_metadata(metadata_config(tmp_path, broker.bootstrap_servers))
    yield running
    await running.stop()
