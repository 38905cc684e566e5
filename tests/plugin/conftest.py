"""Apache Kafka tiering through remotelog: a broker with the plugin as its
RemoteStorageManager and RemoteLogMetadataManager, the segment store and the
metadata manager it calls (their ports chosen before the broker starts), and a
fetch service reading what Kafka tiered. The store is on the broker's host and
hands out file URLs, which the plugin reads segment logs by (the secured tests
take the FetchLogSegment stream)."""

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from fetch.conftest import FetchStack
from support.kafka_cluster import KafkaNode
from support.services import started

from remotelog.dev.broker import BrokerError, free_port
from remotelog.dev.kafka_broker import (
    QUICK_RETENTION,
    KafkaBroker,
    plugin_jar,
    tiered_storage_properties,
)
from remotelog.dev.kafka_jars import compat_jar_of

# Kafka's floor for segment.bytes since 4.1: segments roll every MiB.
SEGMENT_BYTES = 1024 * 1024
FILE_URLS = {"rsm.config.fetch.urls.enabled": "true"}
# The store beside the broker reads its segment files by path.
BY_PATH = {"rsm.config.copy.method": "path"}
# What the plugin logs on its first read by URL, and where a read cannot go by one.
BY_URL = "Reading segment logs from the file: URLs the segment store hands out"
NOT_BY_URL = ("through FetchLogSegment instead of its URL", "hands out no fetch URLs")


@dataclass
class KafkaTiering:
    broker: KafkaBroker
    stack: FetchStack

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers


def tiering_broker(
    tmp,
    store_address: str,
    metadata_address: str,
    node: Mapping[str, Any] | None = None,
    *,
    isolated: bool = True,
    lacks_monitorable: bool = False,
    **broker: str,
) -> KafkaNode:
    """A broker in `tmp`/kafka tiering through the services at these addresses; `node`:
    KafkaNode's fields (node_id, quorum, jmx_port, ...), `broker`: properties over the
    defaults; `isolated`: the plugin loaded by Kafka's class loader for it, else from the
    broker's class path; `lacks_monitorable`: a Kafka before 4.1, on whose class path the
    compat jar goes."""
    try:
        jar = plugin_jar()
    except BrokerError as exc:
        pytest.fail(str(exc))
    class_path = (() if isolated else (jar,)) + ((compat_jar_of(jar),) if lacks_monitorable else ())
    node = {**(node or {}), **({"class_path": class_path} if class_path else {})}
    properties = {
        **tiered_storage_properties(
            jar, store_address, metadata_address, task_interval_ms=500, isolated=isolated
        ),
        **QUICK_RETENTION,
        "log.segment.bytes": str(SEGMENT_BYTES),
        # The root of a filesystem store in `tmp` (support.services.store_config), whose
        # file:// URLs the plugin may read.
        "rsm.config.fetch.file.url.roots": str(tmp / "segments"),
        **broker,
    }
    return KafkaNode(tmp / "kafka", properties=properties, **node)


async def stop_brokers(*brokers: KafkaBroker) -> None:
    """Stop each broker in a thread: the services run on this event loop and must answer
    the plugin's last calls while a broker shuts down (blocked, they would not, and the
    broker would be killed after its grace period)."""
    for broker in brokers:
        await asyncio.to_thread(broker.stop)


@contextlib.asynccontextmanager
async def tiering_stack(
    tmp,
    s3_endpoint,
    node=None,
    *,
    isolated=True,
    backend: str = "filesystem",
    store_settings: Mapping[str, str] = {},
    metadata_settings: Mapping[str, str] = {},
    fetch_settings: Mapping[str, str] = {},
    emulators=None,
    **broker_properties: str,
):
    """A broker with the plugin (`node`: KafkaNode's fields, `broker_properties` over the
    default properties, `isolated` as tiering_broker's) and the services it calls (their
    settings over the defaults; the store on `backend`, GCS's and Azure's on one of
    `emulators`), in `tmp`; the broker stopped
    before the services however the test ends."""
    store, metadata = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    broker = tiering_broker(
        tmp, store, metadata, node, isolated=isolated, **broker_properties
    ).start()
    stack = FetchStack(
        tmp,
        broker.bootstrap_servers,
        s3_endpoint,
        backend,
        store_listen=store,
        metadata_listen=metadata,
        store_settings={
            "storage.filesystem.fetch.urls.enabled": "true",
            # The broker's log directory, for a plugin that copies by path.
            "copy.paths.allowed": str(broker.data_dir),
            **store_settings,
        },
        metadata_settings=dict(metadata_settings),
        emulators=emulators,
    )
    try:
        async with started(stack):
            await stack.start_fetch(**fetch_settings)
            try:
                yield KafkaTiering(broker, stack)
            finally:
                await stop_brokers(broker)  # before the services it calls
    finally:
        broker.stop()


@pytest_asyncio.fixture(scope="module")
async def kafka_tiering(tmp_path_factory, s3_endpoint):
    tmp = tmp_path_factory.mktemp("kafka-tiering")
    jmx = {"jmx_port": free_port()}  # the plugin's metrics, read as an operator would
    # On the broker's class path, where Kafka hands the plugin its metrics registry too;
    # the version matrix (test_versions.py) loads it isolated, as the images do.
    async with tiering_stack(
        tmp, s3_endpoint, jmx, isolated=False, **FILE_URLS, **BY_PATH
    ) as tiering:
        yield tiering
