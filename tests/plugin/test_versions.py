"""One plugin jar on every Apache Kafka from 3.7 to 4.4.

Each release of jvm/pom.xml's kafka.matrix.versions runs as a real KRaft broker of its
own with the same shaded jar, against one segment store and one metadata manager shared
by all of them (its topic on the run's shared broker). Each tiers a small topic holding
a committed and an aborted transaction, frees its disk by local retention, serves every
record back to a plain consumer under both isolation levels, and empties the store when
the topic is deleted.
"""

import asyncio
import contextlib
import itertools
import uuid
import zipfile
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from confluent_kafka.admin import AdminClient
from fetch.conftest import FetchStack, fetch_config
from metadata.scenarios import COPIED, Seg, metadata_of, update_of
from support.kafka_admin import delete_topic_until_gone
from support.kafka_cluster import kafka_libs_of, pinned_kafka, with_kafka_rlmm
from support.recovery import run_recover
from support.services import metadata_config, start_metadata, started
from support.waiting import eventually

from remotelog.client import TieredConsumer
from remotelog.core.errors import MetadataTopicUnavailableError, RemoteLogError
from remotelog.core.model import RemotePartitionDeleteMetadata, TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.core.states import RemotePartitionDeleteState as D
from remotelog.dev.broker import BrokerError, free_port
from remotelog.dev.kafka_broker import KafkaBroker, plugin_jar
from remotelog.dev.kafka_jars import compat_jar_of, lacks_monitorable
from remotelog.fetch.server import start_remote_fetch
from remotelog.metadata.startup import open_metadata_manager
from remotelog.metadata.topic import METADATA_TOPIC

from .conftest import BY_URL, FILE_URLS, stop_brokers, tiering_broker
from .test_kafka_tiers import (
    PARTITIONS,
    TIERING_TIMEOUT_S,
    TXN_RECORDS,
    Produced,
    as_read,
    create_tiered_topic,
    produce_every_kind,
    served_through_kafka,
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


def version_broker(tmp: Path, stack: FetchStack, version: str) -> KafkaBroker:
    """A broker of Kafka `version` with the plugin, tiering through `stack`'s services.
    The plugin is isolated by Kafka's class loader, as the images load it, but on the
    oldest Kafka it is on the broker's class path. A Kafka before 4.1 has no Monitorable
    of its own: the compat jar beside the plugin's brings it, as docs/kafka-plugin.md
    says."""
    store = f"127.0.0.1:{stack.store.service.port}"
    metadata = f"127.0.0.1:{stack.metadata.service.port}"
    libs = {"libs": kafka_libs_of(version)}
    isolated = version != MATRIX[0]
    broker = tiering_broker(
        tmp,
        store,
        metadata,
        libs,
        isolated=isolated,
        lacks_monitorable=lacks_monitorable(version),
        **FILE_URLS,
        # The shared store's root, not this broker's directory.
        **{"rsm.config.fetch.file.url.roots": stack.store.config.storage_root},
    )
    # Kafka 3.7's shutdown never ends once local retention has run: its delete-logs task
    # waits on an empty queue (LogManager.deleteLogs). The others stop within a second.
    broker.stop_grace_s = STOP_GRACE_S
    return broker


async def tiered_topic(broker: KafkaBroker, version: str) -> tuple[str, uuid.UUID]:
    topic = f"v{version.replace('.', '')}-{uuid.uuid4().hex[:6]}"
    return topic, await asyncio.to_thread(create_tiered_topic, broker.bootstrap_servers, topic)


async def produce_and_tier(broker: KafkaBroker, topic: str, past: int) -> Produced:
    """A round of records, both transactions among them, written after offset `past`;
    returned once local retention freed the disk of them (they are tiered)."""
    produced = await asyncio.to_thread(
        produce_every_kind,
        broker.bootstrap_servers,
        topic,
        ("zstd",),
        HEAD_RECORDS,
        TAIL_RECORDS,
    )
    await wait_until_freed(broker, topic, past + PAST_TRANSACTIONS)
    return produced


@pytest.mark.parametrize("version", MATRIX)
async def test_one_jar_tiers_and_serves_history_on_kafka(version, shared_services, tmp_path):
    stack = shared_services
    broker = version_broker(tmp_path, stack, version)
    await asyncio.to_thread(broker.start)
    try:
        assert broker.version == f"Apache Kafka {version}"
        bootstrap = broker.bootstrap_servers
        topic, topic_id = await tiered_topic(broker, version)
        produced = await produce_and_tier(broker, topic, past=0)
        tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]
        for tip in tips:
            finished = await stack.segments(tip, {RemoteLogSegmentState.COPY_SEGMENT_FINISHED})
            assert finished
            assert finished[0].start_offset == 0
            assert stack.objects_of(tip)

        await served_through_kafka(broker, topic, produced)
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
        await stop_brokers(broker)


def test_the_jar_carries_no_kafka_class_and_its_compat_jar_only_monitorable():
    """On a broker's class path the plugin jar comes before Kafka's libs/: a class of
    Kafka's in it would stand in for the broker's own. The interface a 4.1+ broker hands
    its metrics through, which 3.7-4.0 lack and the plugin classes implement, is in the
    compat jar alone, for those brokers."""
    jar = plugin_jar()
    with zipfile.ZipFile(jar) as archive:
        assert [n for n in archive.namelist() if n.startswith("org/apache/kafka/")] == []
    with zipfile.ZipFile(compat_jar_of(jar)) as archive:
        classes = [n for n in archive.namelist() if n.endswith(".class")]
    assert classes == ["org/apache/kafka/common/metrics/Monitorable.class"]
    assert lacks_monitorable(MATRIX[0])
    assert lacks_monitorable("4.0.1")
    assert not lacks_monitorable("4.1.0")
    assert not lacks_monitorable(MATRIX[-1])


def test_the_matrix_spans_the_supported_range():
    """The plugin's own range (KafkaApi) and the versions tested are the same."""
    source = Path(__file__).resolve().parents[2] / "clients/kafka-plugin/src/main/java"
    api = (source / "dev/remotelog/kafka/config/KafkaApi.java").read_text()
    oldest, newest = MATRIX[0].rsplit(".", 1)[0], MATRIX[-1].rsplit(".", 1)[0]
    assert f'OLDEST = "{oldest}"' in api
    assert f'NEWEST = "{newest}"' in api
    assert pinned_kafka("kafka.plugin.api.version") == MATRIX[0]
    assert pinned_kafka("kafka.version") == MATRIX[-1]


# Kafka's own metadata manager beside remotelog's store: its topic's partitions, which
# remotelog's manager must be told to read it.
KAFKA_RLMM_PARTITIONS = 5
READ_ONLY = {"remote.log.metadata.read.only": "true"}


def with_kafkas_rlmm(broker: KafkaBroker) -> KafkaBroker:
    """The broker's RemoteLogMetadataManager swapped for Kafka's own (at its next start)."""
    broker.properties = with_kafka_rlmm(
        broker.properties, metadata_partitions=KAFKA_RLMM_PARTITIONS
    )
    return broker


@contextlib.asynccontextmanager
async def remotelog_reader(tmp: Path, stack: FetchStack, broker: KafkaBroker, **settings: str):
    """remotelog's metadata manager on `broker`'s `__remote_log_metadata` (read-only by
    default) and a fetch service over it and the shared store: (manager, fetch)."""
    name = f"reader-{uuid.uuid4().hex[:6]}"
    config = metadata_config(
        tmp,
        broker.bootstrap_servers,
        name,
        **{
            "remote.log.metadata.topic.num.partitions": str(KAFKA_RLMM_PARTITIONS),
            # A recovery's segments are checked against the shared store's manifests.
            "segment.store.address": f"127.0.0.1:{stack.store.service.port}",
            **READ_ONLY,
            **settings,
        },
    )
    manager = await start_metadata(config)
    fetch = None
    try:
        fetch_settings = fetch_config(
            tmp, stack.store.service.port, manager.service.port, f"{name}-fetch"
        )
        fetch = await start_remote_fetch(fetch_settings)
        yield manager, fetch
    finally:
        if fetch is not None:
            await fetch.stop(1.0)
        await manager.stop()


async def wait_until_all_tiered(
    manager, tips: list[TopicIdPartition], read: dict
) -> dict[int, list]:
    """Until `manager` lists every partition tiered up to the last offset Kafka served
    (`read`: served_through_kafka's), then checks the listing: one copy of each
    segment, from offset 0, with no gap. The finished segments, by partition."""

    async def finished_segments() -> dict[int, list] | None:
        found = {}
        for tip in tips:
            try:
                listed = [s async for s in manager.client.list_remote_log_segments(tip)]
            except RemoteLogError:  # not loaded yet
                return None
            copied = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            found[tip.partition] = [s for s in listed if s.state is copied]
            last = read[tip.partition, "read_uncommitted"][-1].offset()
            if not found[tip.partition] or found[tip.partition][-1].end_offset != last:
                return None
        return found

    found = await eventually(finished_segments, timeout_s=TIERING_TIMEOUT_S, interval_s=0.5)
    for segments in found.values():
        assert segments[0].start_offset == 0
        for before, after in itertools.pairwise(segments):
            assert after.start_offset == before.end_offset + 1  # no gap, nothing twice
    return found


@pytest.mark.parametrize("version", [MATRIX[0], MATRIX[-1]])
async def test_kafkas_own_metadata_manager_beside_the_remotelog_store(
    version, shared_services, tmp_path, spark
):
    """Kafka's TopicBasedRemoteLogMetadataManager writes `__remote_log_metadata`, the
    remotelog store holds the bytes; remotelog's manager, read-only on that topic,
    serves the fetch service, the TieredConsumer and Spark with no broker in the path."""
    stack = shared_services
    broker = with_kafkas_rlmm(version_broker(tmp_path, stack, version))
    await asyncio.to_thread(broker.start)
    try:
        topic, topic_id = await tiered_topic(broker, version)
        produced = await produce_and_tier(broker, topic, past=0)
        read = await served_through_kafka(broker, topic, produced)
        tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]

        async with remotelog_reader(tmp_path, stack, broker) as (manager, fetch):
            # The topic has one writer: remotelog's manager refuses to be a second.
            segment = metadata_of(tips[0], Seg("refused", 0, 9, {0: 0}))
            client = manager.client
            for write in (
                client.add_remote_log_segment_metadata(segment),
                client.update_remote_log_segment_metadata(update_of(segment, COPIED)),
                client.put_remote_partition_delete_metadata(
                    RemotePartitionDeleteMetadata(tips[0], D.DELETE_PARTITION_MARKED, 1, 0)
                ),
            ):
                with pytest.raises(RemoteLogError) as refused:
                    await write
                assert refused.value.grpc_code is grpc.StatusCode.FAILED_PRECONDITION
                assert refused.value.reason == "METADATA_READ_ONLY"
                assert "remote.log.metadata.read.only=true" in refused.value.message
            await wait_until_all_tiered(manager, tips, read)

            def tiered(partition: int, isolation: str) -> list[tuple]:
                return as_read(read[partition, isolation])

            async with TieredConsumer.connect(
                f"127.0.0.1:{fetch.port}", f"127.0.0.1:{manager.service.port}"
            ) as consumer:
                for tip in tips:
                    records = [r async for r in consumer.read(tip, "earliest")]
                    found = [(r.key, r.value, tuple(r.headers)) for r in records]
                    assert found == tiered(tip.partition, "read_uncommitted")
            frame = (
                spark.read.format("remotelog")
                .option("remotelog.fetch.address", f"127.0.0.1:{fetch.port}")
                .option("remotelog.metadata.address", f"127.0.0.1:{manager.service.port}")
                .option("kafka.isolation.level", "read_committed")
                .option("includeHeaders", "true")
                .option("subscribe", topic)
                .load()
                .orderBy("partition", "offset")
            )
            rows = await asyncio.to_thread(
                frame.select("partition", "key", "value", "headers").collect
            )
            for partition in range(PARTITIONS):
                found = [
                    (r.key, r.value, tuple((h.key, h.value) for h in r.headers or ()))
                    for r in rows
                    if r.partition == partition
                ]
                assert found == tiered(partition, "read_committed")
    finally:
        await stop_brokers(broker)


async def test_a_read_only_manager_never_creates_the_metadata_topic(broker, tmp_path):
    config = metadata_config(
        tmp_path,
        broker.bootstrap_servers,
        **READ_ONLY,
        **{"remote.log.metadata.initialization.retry.max.timeout.ms": "1500"},
    )
    topic = f"absent-metadata-{uuid.uuid4().hex[:6]}"
    with pytest.raises(MetadataTopicUnavailableError) as unavailable:
        await open_metadata_manager(config, topic=topic)
    assert f"could not find {topic}" in str(unavailable.value)
    listed = await asyncio.to_thread(
        AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics, timeout=10
    )
    assert topic not in listed.topics


async def test_switching_metadata_managers_both_ways_loses_and_repeats_nothing(
    shared_services, tmp_path
):
    """Kafka's RLMM tiers; the broker restarts with remotelog's, reads the whole history
    and tiers more; it restarts with Kafka's again, which reads what remotelog wrote,
    tiers more, and serves it all. Both write `__remote_log_metadata` alike."""
    stack = shared_services
    version = MATRIX[-1]
    broker = version_broker(tmp_path / "switch", stack, version)
    remotelogs = broker.properties
    with_kafkas_rlmm(broker)
    await asyncio.to_thread(broker.start)
    try:
        topic, topic_id = await tiered_topic(broker, version)
        produced = await produce_and_tier(broker, topic, past=0)
        tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]
        round_offsets = HEAD_RECORDS + 2 * (TXN_RECORDS + 1) + TAIL_RECORDS

        # remotelog's RLMM, writable, on the same topic and cluster as Kafka's was.
        await asyncio.to_thread(broker.stop)
        metadata_port = free_port()
        address = f"127.0.0.1:{metadata_port}"
        broker.properties = {**remotelogs, "rlmm.config.metadata.manager.address": address}
        await asyncio.to_thread(broker.start)
        async with remotelog_reader(
            tmp_path,
            stack,
            broker,
            **{
                "remote.log.metadata.read.only": "false",
                "listen.address": f"127.0.0.1:{metadata_port}",
            },
        ):
            await served_through_kafka(broker, topic, produced)
            produced.extend(await produce_and_tier(broker, topic, past=round_offsets))
            await served_through_kafka(broker, topic, produced)
            await asyncio.to_thread(broker.stop)  # while its metadata manager answers

        # Kafka's RLMM again: it reads what remotelog's wrote, and tiers on.
        with_kafkas_rlmm(broker)
        await asyncio.to_thread(broker.start)
        produced.extend(await produce_and_tier(broker, topic, past=2 * round_offsets))
        read = await served_through_kafka(broker, topic, produced)
        async with remotelog_reader(tmp_path, stack, broker) as (manager, _):
            tiered = await wait_until_all_tiered(manager, tips, read)
        # Three rounds, every one tiered: the last offset of the third is the last tiered.
        assert {p: s[-1].end_offset for p, s in tiered.items()} == dict.fromkeys(
            range(PARTITIONS), 3 * round_offsets - 1
        )
    finally:
        await stop_brokers(broker)


async def test_kafkas_own_metadata_manager_reads_the_topic_recover_rebuilt(
    shared_services, tmp_path
):
    """Kafka's RLMM tiers, and its `__remote_log_metadata` is lost. Kafka's RLMM keeps
    what it knew in memory, so the broker, kept running, serves and tiers on meanwhile.
    A writable remotelog manager creates the topic again with the brokers' partition
    count, and `recover` fills it. Restarted, Kafka's RLMM knows only that topic: it
    serves the whole history from it and tiers on after it, with no gap."""
    stack = shared_services
    version = MATRIX[-1]
    broker = with_kafkas_rlmm(version_broker(tmp_path / "lost", stack, version))
    await asyncio.to_thread(broker.start)
    try:
        topic, topic_id = await tiered_topic(broker, version)
        produced = await produce_and_tier(broker, topic, past=0)
        tips = [TopicIdPartition(topic_id, topic, p) for p in range(PARTITIONS)]
        read = await served_through_kafka(broker, topic, produced)
        async with remotelog_reader(tmp_path, stack, broker) as (manager, _):
            tiered = await wait_until_all_tiered(manager, tips, read)

        await asyncio.to_thread(delete_topic_until_gone, broker.bootstrap_servers, METADATA_TOPIC)
        writable = {"remote.log.metadata.read.only": "false"}
        async with remotelog_reader(tmp_path, stack, broker, **writable) as (manager, _):
            address = f"127.0.0.1:{manager.service.port}"
            lines = await run_recover(
                stack, "--topic", topic, **{"metadata.manager.address": address}
            )
        assert sum(line.startswith("wrote  ") for line in lines) == sum(
            len(s) for s in tiered.values()
        )

        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(broker.start)
        # Its log start offset is still 0: Kafka's RLMM found the first recovered
        # segment when the broker led again.
        await served_through_kafka(broker, topic, produced)
        round_offsets = HEAD_RECORDS + 2 * (TXN_RECORDS + 1) + TAIL_RECORDS
        produced.extend(await produce_and_tier(broker, topic, past=round_offsets))
        read = await served_through_kafka(broker, topic, produced)
        async with remotelog_reader(tmp_path, stack, broker) as (manager, _):
            after = await wait_until_all_tiered(manager, tips, read)  # no gap, none twice
        for partition, segments in after.items():
            recovered = segments[: len(tiered[partition])]
            assert [s.remote_log_segment_id for s in recovered] == [
                s.remote_log_segment_id for s in tiered[partition]
            ]
            assert segments[-1].end_offset == 2 * round_offsets - 1
    finally:
        await stop_brokers(broker)


async def test_a_broker_restarted_before_the_recovery_moves_its_log_start_past_the_history(
    shared_services, tmp_path
):
    """What docs/disaster-recovery.md warns of, on Kafka's own RLMM: its topic is lost
    and the broker restarts before any recovery. Leading again, Kafka finds no remote
    segment and moves each partition's log start offset to its first local offset, past
    the whole tiered history, for good."""
    stack = shared_services
    broker = with_kafkas_rlmm(version_broker(tmp_path / "unrecovered", stack, MATRIX[-1]))
    await asyncio.to_thread(broker.start)
    try:
        topic, _ = await tiered_topic(broker, MATRIX[-1])
        await produce_and_tier(broker, topic, past=0)
        earliest = await asyncio.to_thread(broker.list_offsets, topic, "-2")
        assert earliest == dict.fromkeys(range(PARTITIONS), 0)  # the history, from 0

        await asyncio.to_thread(delete_topic_until_gone, broker.bootstrap_servers, METADATA_TOPIC)
        await asyncio.to_thread(broker.stop)
        await asyncio.to_thread(broker.start)

        def moved() -> dict[int, int] | None:
            found = broker.list_offsets(topic, "-2")
            return found if len(found) == PARTITIONS and min(found.values()) > 0 else None

        moved_to = await eventually(lambda: asyncio.to_thread(moved), timeout_s=120, interval_s=1)
        local = await asyncio.to_thread(broker.list_offsets, topic, "earliest-local")
        for partition in range(PARTITIONS):
            assert 0 < moved_to[partition] <= local[partition]
    finally:
        await stop_brokers(broker)
