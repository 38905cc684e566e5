"""Metadata manager fixtures (helpers in support.services; the broker is a session fixture)."""

import pytest_asyncio
from support.services import metadata_config, start_metadata

from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager
from remotelog.metadata.startup import open_metadata_manager


@pytest_asyncio.fixture
async def metadata(tmp_path, broker):
    running = await start_metadata(metadata_config(tmp_path, broker.bootstrap_servers))
    yield running
    await running.stop()


@pytest_asyncio.fixture
async def started(tmp_path, broker):
    """started(name, topic, **config) -> a running manager; all are closed after the test."""
    running: list[TopicBasedRemoteLogMetadataManager] = []

    async def start(name: str, topic: str, **extra: str) -> TopicBasedRemoteLogMetadataManager:
        config = metadata_config(tmp_path, broker.bootstrap_servers, name, **extra)
        manager = await open_metadata_manager(config, topic=topic)
        running.append(manager)
        return manager

    yield start
    for manager in running:
        await manager.close()
