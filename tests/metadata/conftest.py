"""Metadata manager fixtures: a real Tansu broker and the service started against it."""

from pathlib import Path

import pytest
import pytest_asyncio

from remotelog.client import ClientOptions, MetadataClient
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.config import load_config
from remotelog.dev.broker import EmbeddedBroker
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.server import start_metadata_manager

# A small metadata topic keeps the broker's work (and the tests) light.
PARTITIONS = 5


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """Tansu with its memory engine, on a free loopback port."""
    log = tmp_path_factory.mktemp("tansu") / "broker.log"
    with EmbeddedBroker(log_path=log) as running:
        yield running


def metadata_config(
    tmp: Path, bootstrap: str, name: str = "metadata", **extra: str
) -> MetadataManagerConfig:
    properties = {
        "listen.address": "127.0.0.1:0",
        "bootstrap.servers": bootstrap,
        "remote.log.metadata.topic.num.partitions": str(PARTITIONS),
        "remote.log.metadata.topic.replication.factor": "1",
        "remote.log.metadata.consume.wait.ms": "10000",
        "remote.log.metadata.consumer.fetch.max.wait.ms": "10",
        "remote.log.metadata.initialization.retry.max.timeout.ms": "20000",
        "remote.log.metadata.snapshot.dir": str(tmp / name / "snapshots"),
        **extra,
    }
    path = tmp / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    config, _ = load_config(MetadataManagerConfig, path, {})
    return config


class Running:
    """A started metadata manager service with a client."""

    def __init__(self, service, client, config):
        self.service = service
        self.client = client
        self.config = config

    @property
    def manager(self):
        return self.service.app

    async def stop(self):
        await self.client.close()
        await self.service.stop(1.0)


async def start_running(config: MetadataManagerConfig) -> Running:
    service = await start_metadata_manager(config)
    client = MetadataClient(
        f"127.0.0.1:{service.port}",
        options=ClientOptions(
            timeout_s=20, backoff=ExponentialBackoff(initial_ms=10, max_ms=100, jitter=0.2)
        ),
    )
    return Running(service, client, config)


@pytest_asyncio.fixture
async def metadata(tmp_path, broker):
    running = await start_running(metadata_config(tmp_path, broker.bootstrap_servers))
    yield running
    await running.stop()
