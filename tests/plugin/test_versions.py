"""One plugin jar on every Apache Kafka from 3.7 to 4.4.

Each release of jvm/pom.xml's kafka.matrix.versions runs as a real KRaft broker of its
own with the same shaded jar, against one segment store and one metadata manager shared
by all of them (its topic on the run's shared broker). Each tiers a small topic holding
a committed and an aborted transaction, frees its disk by local retention, serves every
record back to a plain consumer under both isolation levels, and empties the store when
the topic is deleted.
"""

import asyncio
import uuid
import zipfile
from pathlib import Path

import pytest
import pytest_asyncio
from confluent_kafka.admin import AdminClient
from fetch.conftest import FetchStack
from support.services import started
from support.topics import read_to_end
from support.waiting import eventually

from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.broker import BrokerError
from remotelog.dev.kafka_broker import KafkaBroker, kafka_libs_of, pinned_kafka, plugin_jar

from .conftest import BY_URL, FILE_URLS, stop_brokers, tiering_broker
from .test_kafka_tiers import (
    PARTITIONS,
    TIERING_TIMEOUT_S,
    TXN_RECORDS,
    as_read,
    create_tiered_topic,
    produce_every_kind,
)

MATRIX = pinned_kafka("kafka.matrix.versions").split()
# 600-byte values: the head and both transactions fill most of the first 1 MiB segment,
# the tail rolls it, so the transactions are tiered.
HEAD_RECORDS, TAIL_RECORDS = 600, 1400
# Past the transactions and their markers: local retention must have deleted that far.
PAST_TRANSACTIONS = HEAD_RECORDS + 2 * (TXN_RECORDS + 1)
JAVA_11_CLASS = 55
STOP_GRACE_S = 5.0
# What the plugin logs on a broker outside the range it is tested on.
BEYOND_RANGE = "The remotelog plugin is tested on Kafka"


def test_the_jar_is_java_11_bytecode():
    """Kafka 3.x brokers commonly run on Java 11: no class in the shaded jar may need more."""
    try:
        jar = plugin_jar()
    except BrokerError as exc:
        pytest.fail(str(exc))
    versions: dict[str, int] = {}
    with zipfile.ZipFile(jar) as archive:
        for name in archive.namelist():
            # Multi-release entries load only on the Java they name.
            if name.endswith(".class") and not name.startswith("META-INF/versions/"):
                header = archive.read(name)[:8]
                assert header[:4] == b"\xca\xfe\xba\xbe", name
                versions[name] = int.from_bytes(header[6:8], "big")
    own = {
        name: v
        for name, v in versions.items()
        if name.startswith(("dev/remotelog/kafka/", "remotelog/api/"))
        and not name.startswith("dev/remotelog/kafka/shaded/")
    }
    assert "dev/remotelog/kafka/RemotelogStorageManager.class" in own
    assert set(own.values()) == {JAVA_11_CLASS}
    too_new = {name: v for name, v in versions.items() if v > JAVA_11_CLASS}
    assert too_new == {}


def local_log_start(broker: KafkaBroker, topic: str, partition: int) -> int:
    """The base offset of the partition's oldest segment on the broker's disk: what
    ListOffsets -4 answers, read where every Kafka version keeps it."""
    directory = broker.data_dir / f"{topic}-{partition}"
    return min(int(log.stem) for log in directory.glob("*.log"))


async def wait_until_freed(broker: KafkaBroker, topic: str, past: int) -> dict[int, int]:
    """Until every partition's oldest local segment starts past `past`."""

    def freed() -> dict[int, int] | None:
        starts = {p: local_log_start(broker, topic, p) for p in range(PARTITIONS)}
        return starts if min(starts.values()) > past else None

    return await eventually(freed, timeout_s=TIERING_TIMEOUT_S, interval_s=0.5)


@pytest_asyncio.fixture(scope="module")
async def shared_services(tmp_path_factory, broker, s3_endpoint):
    """The segment store (handing out file URLs, as on a broker's host) and the metadata
    manager every version's broker tiers through."""
    tmp = tmp_path_factory.mktemp("versions")
    stack = FetchStack(
        tmp,
        broker.bootstrap_servers,
        s3_endpoint,
        "filesystem",
        store_settings={"storage.filesystem.fetch.urls.enabled": "true"},
    )
    async with started(stack):
        yield stack


@pytest.mark.parametrize("version", MATRIX)
async def test_one_jar_tiers_and_serves_history_on_kafka(version, shared_services, tmp_path):
    stack = shared_services
    store = f"127.0.0.1:{stack.store.service.port}"
    metadata = f"127.0.0.1:{stack.metadata.service.port}"
    libs = {"libs": kafka_libs_of(version)}
    broker = tiering_broker(tmp_path, store, metadata, libs, **FILE_URLS)
    await asyncio.to_thread(broker.start)
    try:
        assert broker.version == f"Apache Kafka {version}"
        bootstrap = broker.bootstrap_servers
        topic = f"v{version.replace('.', '')}-{uuid.uuid4().hex[:6]}"
        topic_id = await asyncio.to_thread(create_tiered_topic, bootstrap, topic)
        produced = await asyncio.to_thread(
            produce_every_kind, bootstrap, topic, ("zstd",), HEAD_RECORDS, TAIL_RECORDS
        )
        # Local retention freed the disk of the tiered segments, transactions and all.
        await wait_until_freed(broker, topic, PAST_TRANSACTIONS)
        tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]
        for tip in tips:
            finished = await stack.segments(tip, {RemoteLogSegmentState.COPY_SEGMENT_FINISHED})
            assert finished
            assert finished[0].start_offset == 0
            assert stack.objects_of(tip)

        # The whole history through Kafka, the tiered part read through the plugin.
        earliest = await asyncio.to_thread(broker.list_offsets, topic, "-2")
        assert earliest == dict.fromkeys(range(PARTITIONS), 0)
        for partition in range(PARTITIONS):
            for isolation, committed_only in (
                ("read_uncommitted", False),
                ("read_committed", True),
            ):
                messages = await asyncio.to_thread(
                    read_to_end, bootstrap, topic, partition, isolation
                )
                assert messages[0].offset() == 0
                found = as_read(messages)
                assert found == produced.expected(partition, committed_only), isolation
        log = broker.run_log()
        assert [line for line in log if BY_URL in line]
        assert not [line for line in log if BEYOND_RANGE in line]

        # Deleting the topic deletes what Kafka tiered of it.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        await asyncio.to_thread(admin.delete_topics([topic])[topic].result, 30)

        async def emptied() -> bool:
            return all(stack.objects_of(tip) == {} for tip in tips)

        await eventually(emptied, timeout_s=TIERING_TIMEOUT_S)
    finally:
        # Kafka 3.7's shutdown hangs once a topic was deleted (its delete-logs task waits
        # on an empty queue in LogManager.deleteLogs); everything was read back by then.
        broker.stop_grace_s = STOP_GRACE_S
        await stop_brokers(broker)


def test_the_matrix_spans_the_supported_range():
    """The plugin's own range (KafkaApi) and the versions tested are the same."""
    source = Path(__file__).resolve().parents[2] / "clients/kafka-plugin/src/main/java"
    api = (source / "dev/remotelog/kafka/KafkaApi.java").read_text()
    oldest, newest = MATRIX[0].rsplit(".", 1)[0], MATRIX[-1].rsplit(".", 1)[0]
    assert f'OLDEST = "{oldest}"' in api
    assert f'NEWEST = "{newest}"' in api
    assert pinned_kafka("kafka.plugin.api.version") == MATRIX[0]
    assert pinned_kafka("kafka.version") == MATRIX[-1]
