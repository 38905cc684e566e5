"""Sidecars that follow their brokers by themselves, on two Apache Kafka 3.5 brokers.

Kafka 3.5 comes from before tiered storage: it takes `remote.storage.enable=true` as
a topic config and tiers nothing itself. Beside each broker runs a copy scheduler
with discovery on, reading that broker's log directory and asking that broker about
the cluster. No test hands a partition over: the sidecars find them, follow leader
changes, retention changes and deletions, and wait out their broker's absence.
Last, discovery reads a secured Kafka 4.4 broker through each way in.
"""

import asyncio
import itertools
import logging
import uuid
from dataclasses import dataclass

import pytest
import pytest_asyncio
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from remover.conftest import events_of, lifecycle, remover_config_beside
from support.kafka_admin import (
    PAIR,
    create_topic,
    delete_topic,
    elect_preferred,
    in_sync,
    leaders,
    produce_random,
    set_topic_config,
)
from support.kafka_cluster import KafkaNode, kafka_libs_of, pinned_kafka
from support.kafka_security import WAYS_IN, SecuredBroker
from support.services import CLIENT_OPTIONS, ServiceRunning, load_properties, started
from support.telemetry import metric_points
from support.tls import make_certificates
from support.waiting import eventually

from remotelog.api.scheduler.v1 import copy_scheduler_pb2 as pb
from remotelog.client import PartitionRemoverClient
from remotelog.core import metrics as m
from remotelog.core.errors import KafkaUnavailableError, UnknownTopicOrPartitionError
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.dev.kafka_broker import QUICK_RETENTION, BrokerTls, KafkaBroker, SaslUsers
from remotelog.remover.server import start_partition_remover
from remotelog.scheduler.cluster import ClusterAccessDeniedError, KafkaCluster
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.metrics import SCOPE
from remotelog.scheduler.server import DISCOVERY_MIN_TIMEOUT_S

from .conftest import FINISHED, SchedulerRunning, SchedulerStack

# The high watermark reaches the checkpoint file the sidecar reads within 200 ms.
BROKER = {**PAIR, **QUICK_RETENTION, "replica.high.watermark.checkpoint.interval.ms": "200"}
SEGMENT_BYTES = 64 * 1024  # about 60 records of 1 KiB
BATCH_BYTES = 16 * 1024  # the producer's batches fit a segment
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES)}
UNTIERED = {"segment.bytes": str(SEGMENT_BYTES)}
PATTERN = "patterned-.*"
RETAINED = {"retention.ms": "3600000", "local.retention.bytes": "1048576"}
INTERVAL_MS = 300
RECORDS = 200  # a partition: three rolled segments and an active one
DISCOVERY_LOG = "remotelog.scheduler.discovery"
SCHEDULER_LOG = "remotelog.scheduler.scheduler"
COPY_LOG = "remotelog.scheduler.copy_task"


@dataclass
class Sidecars:
    brokers: dict[int, KafkaBroker]
    stack: SchedulerStack
    schedulers: dict[int, SchedulerRunning]
    remover: ServiceRunning

    @property
    def bootstrap(self) -> str:
        """Broker 1, the controller: up throughout."""
        return self.brokers[1].bootstrap_servers

    async def finished(self, tip: TopicIdPartition) -> list:
        segments = await self.stack.segments(tip, {FINISHED})
        return sorted(segments, key=lambda s: (s.start_offset, s.end_offset))

    async def has_role(self, node: int, tip: TopicIdPartition, role: int) -> None:
        """Until broker `node`'s sidecar has the partition in `role` (its next look)."""

        async def in_role() -> bool:
            try:
                state = await self.schedulers[node].client.partition_state(tip)
            except UnknownTopicOrPartitionError:
                return False
            return state.role == role

        await eventually(in_role, timeout_s=30, interval_s=0.1)

    def rolled_end(self, node: int, tip: TopicIdPartition) -> int:
        """The last offset of the broker's rolled segments of the partition."""
        directory = self.brokers[node].data_dir / f"{tip.topic}-{tip.partition}"
        return max(int(log.stem) for log in directory.glob("*.log")) - 1

    async def tiered_to_rolled_end(self, node: int, tip: TopicIdPartition) -> None:
        """Until every segment broker `node` has rolled is tiered."""
        end = await asyncio.to_thread(self.rolled_end, node, tip)
        assert end > 0

        async def tiered() -> bool:
            segments = await self.finished(tip)
            return bool(segments) and segments[-1].end_offset >= end

        await eventually(tiered, timeout_s=60, interval_s=0.1, why=lambda: f"{tip} to {end}")


def sidecar_settings(broker: KafkaBroker, remover_port: int, redis_url: str) -> dict[str, str]:
    """A copy scheduler beside `broker`, as the sidecar deployments run it."""
    return {
        "broker.id": str(broker.node_id),
        "redis.url": redis_url,
        "remote.log.manager.local.retention.enabled": "false",
        "remote.log.manager.discovery.enabled": "true",
        "remote.log.manager.discovery.interval.ms": str(INTERVAL_MS),
        "remote.log.manager.discovery.topic.pattern": PATTERN,
        "log.dirs": str(broker.data_dir),
        "bootstrap.servers": broker.bootstrap_servers,
        "partition.remover.address": f"127.0.0.1:{remover_port}",
    }


@pytest_asyncio.fixture(scope="module")
async def sidecars(tmp_path_factory, s3_endpoint, redis_url):
    tmp = tmp_path_factory.mktemp("sidecars")
    libs = kafka_libs_of(pinned_kafka("kafka.sidecar.version"))
    first = KafkaBroker(tmp / "1", libs=libs, properties=BROKER)
    second = KafkaNode(tmp / "2", libs=libs, properties=BROKER, node_id=2, quorum=first)
    replicated = {"remote.log.metadata.topic.replication.factor": "2"}
    stack = SchedulerStack(tmp, "", s3_endpoint, "s3", kafka_settings=replicated)
    try:
        first.start()
        second.start()
        stack.bootstrap = first.bootstrap_servers
        async with started(stack):
            store, metadata = stack.store.service.port, stack.metadata.service.port
            config = remover_config_beside(
                tmp, stack.bootstrap, store, metadata, **{"listen.address": "127.0.0.1:0"}
            )
            service = await start_partition_remover(config)
            client = PartitionRemoverClient(f"127.0.0.1:{service.port}", options=CLIENT_OPTIONS)
            remover = stack.started(ServiceRunning(service, client))
            schedulers = {
                broker.node_id: await stack.start_scheduler(
                    f"sidecar-{broker.node_id}",
                    **sidecar_settings(broker, service.port, redis_url),
                )
                for broker in (first, second)
            }
            yield Sidecars({1: first, 2: second}, stack, schedulers, remover)
    finally:
        second.stop()
        # Kafka 3.5's combined node, its peer gone, hangs in its controlled shutdown until
        # the 30 s grace runs out; the tests are done with its data.
        first.kill()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def produce(
    bootstrap: str, topic: str, partitions: int, records: int = RECORDS, keyed: bool = False
) -> dict[int, list[bytes]]:
    return await asyncio.to_thread(
        produce_random, bootstrap, topic, records, partitions, keyed=keyed, batch_bytes=BATCH_BYTES
    )


def tips_of(topic: str, topic_id: uuid.UUID, partitions: int) -> list[TopicIdPartition]:
    return [TopicIdPartition(topic_id, topic, p) for p in range(partitions)]


async def test_topics_with_the_tiering_config_or_the_pattern_are_tiered_with_no_call(sidecars):
    boot = sidecars.bootstrap
    replicas = [[1, 2], [2, 1]]
    configured, patterned = unique("configured"), unique("patterned")
    plain, compacted = unique("plain"), unique("patterned-compacted")
    ids = {
        configured: create_topic(boot, configured, replicas=replicas, config=TIERED),
        patterned: create_topic(boot, patterned, replicas=replicas, config=UNTIERED),
        plain: create_topic(boot, plain, replicas=replicas, config=UNTIERED),
        compacted: create_topic(
            boot, compacted, replicas=replicas, config=UNTIERED | {"cleanup.policy": "compact"}
        ),
    }
    # Keyed: a compacted topic takes no record without a key.
    produced = {topic: await produce(boot, topic, 2, keyed=True) for topic in ids}
    for topic in (configured, patterned):
        for tip in tips_of(topic, ids[topic], 2):
            leader = replicas[tip.partition][0]
            await sidecars.tiered_to_rolled_end(leader, tip)
            # Copied by the leader's sidecar, record for record as produced.
            assert {s.broker_id for s in await sidecars.finished(tip)} == {leader}
            remote = await sidecars.stack.remote_records(tip)
            values = produced[topic][tip.partition]
            assert remote == {offset: (str(offset).encode(), values[offset]) for offset in remote}
            assert min(remote) == 0
            assert max(remote) >= RECORDS // 2
            # The other sidecar follows it.
            await sidecars.has_role(leader, tip, pb.PARTITION_ROLE_LEADER)
            await sidecars.has_role(3 - leader, tip, pb.PARTITION_ROLE_FOLLOWER)
    # Neither a topic without the config or the pattern nor a compacted one: by then
    # both sidecars have looked at them many times.
    listed = await sidecars.stack.metadata.client.list_remote_partitions()
    assert {p.topic_id_partition.topic for p in listed} & {plain, compacted} == set()
    for tip in [*tips_of(plain, ids[plain], 2), *tips_of(compacted, ids[compacted], 2)]:
        for scheduler in sidecars.schedulers.values():
            with pytest.raises(UnknownTopicOrPartitionError):
                await scheduler.client.partition_state(tip)


async def test_a_retention_change_is_applied_at_the_next_interval(sidecars):
    topic = unique("retained")
    tip = tips_of(
        topic, create_topic(sidecars.bootstrap, topic, replicas=[[1, 2]], config=TIERED), 1
    )[0]
    await produce(sidecars.bootstrap, topic, 1, RECORDS * 2)
    await sidecars.tiered_to_rolled_end(1, tip)
    leader = sidecars.schedulers[1].client
    assert (await leader.partition_state(tip)).effective_retention_bytes == -1
    before = await sidecars.finished(tip)
    assert before[0].start_offset == 0
    assert len(before) >= 5

    retained = 2 * SEGMENT_BYTES
    await asyncio.to_thread(
        set_topic_config, sidecars.bootstrap, topic, "retention.bytes", retained
    )

    async def expired() -> bool:
        state = await leader.partition_state(tip)
        segments = await sidecars.finished(tip)
        return state.effective_retention_bytes == retained and segments[0].start_offset > 0

    await eventually(expired, timeout_s=30, interval_s=0.1)
    # Only the oldest went, and what is left is still one unbroken range.
    after = await sidecars.finished(tip)
    assert after == [s for s in before if s.start_offset >= after[0].start_offset][: len(after)]
    assert sum(s.segment_size_in_bytes for s in after) < sum(
        s.segment_size_in_bytes for s in before
    )


async def audit(sidecars: Sidecars, tip: TopicIdPartition, values: list[bytes]) -> None:
    """No gap and no duplicate in the remote tier: each segment starts at or before the
    offset after the previous one ends (a new leader's first segment may overlap the old
    leader's, as in Kafka), none starts where another starts, none lies inside another;
    every record in it is the one produced at its offset, from offset 0 on."""
    segments = await sidecars.finished(tip)
    for before, after in itertools.pairwise(segments):
        assert after.start_offset <= before.end_offset + 1, f"gap after {before.end_offset}"
        assert after.start_offset > before.start_offset, f"two at {after.start_offset}"
        assert after.end_offset > before.end_offset, f"{after} inside {before}"
    remote = await sidecars.stack.remote_records(tip)
    assert sorted(remote) == list(range(len(remote)))
    assert remote == {offset: (None, values[offset]) for offset in remote}


async def assert_handed_over(caplog, sidecars: Sidecars, tip: TopicIdPartition, old: int, new: int):
    """In the scheduler's log since the test last cleared it: broker `new`'s sidecar
    followed the partition for a look before it led it, and broker `old`'s copied its
    last segment of it before broker `new`'s copied its first. (When the old sidecar
    takes the follower role depends on when it looks; the lease keeps the two
    sidecars' runs apart, so the copies are what is ordered.)"""
    lines = [r.getMessage() for r in caplog.records if r.name in (SCHEDULER_LOG, COPY_LOG)]
    directory = sidecars.brokers[new].data_dir / f"{tip.topic}-{tip.partition}"
    roles = [
        line.split(" of ", 1)[0]
        for line in lines
        if line.startswith(("leader of ", "follower of "))
        and line.endswith(f"log dir {directory}")
        and f" of {tip} " in line
    ]
    assert roles.index("follower") < roles.index("leader"), roles
    copier = {str(s.remote_log_segment_id): s.broker_id for s in await sidecars.finished(tip)}
    copies = [
        copier.get(line.rsplit(" as ", 1)[1])
        for line in lines
        if line.startswith(f"tiered {tip} offsets ")
    ]
    assert new in copies
    assert set(copies) <= {old, new}
    assert copies == sorted(copies, key=lambda broker: broker == new), copies


async def test_a_leader_change_moves_copying_to_the_new_leaders_sidecar(sidecars, caplog):
    """Broker 2 leads; it stops, broker 1 takes over and so does its sidecar; broker 2
    comes back and leads again after a preferred election, and its sidecar copies
    again. Each time the old leader's sidecar stops copying before the new one's
    starts, and nothing is lost or copied twice."""
    for logger in (SCHEDULER_LOG, COPY_LOG):
        caplog.set_level(logging.INFO, logger=logger)
    boot, second = sidecars.bootstrap, sidecars.brokers[2]
    topic = unique("moving")
    topic_id = create_topic(boot, topic, replicas=[[2, 1], [2, 1]], config=TIERED)
    tips = tips_of(topic, topic_id, 2)
    produced = await produce(boot, topic, 2)
    for tip in tips:
        await sidecars.tiered_to_rolled_end(2, tip)

    async def moved(old: int, new: int) -> dict[int, list[bytes]]:
        """Once broker `new` leads: more records, tiered by its sidecar, after broker
        `old`'s (which follows now) stopped copying; the records."""
        await eventually(lambda: set(leaders(boot, topic).values()) == {new}, timeout_s=60)
        values = await produce(boot, topic, 2)
        for tip in tips:
            await sidecars.tiered_to_rolled_end(new, tip)
            await sidecars.has_role(old, tip, pb.PARTITION_ROLE_FOLLOWER)
            await assert_handed_over(caplog, sidecars, tip, old, new)
        return values

    caplog.clear()
    second.stop()
    # Broker 2's sidecar follows what its stopped broker no longer leads.
    more = await moved(2, 1)

    # Cleared before the restart: broker 2's sidecar may take the follower role while
    # its broker catches up, before it is in sync again.
    caplog.clear()
    await asyncio.to_thread(second.start)
    await eventually(lambda: in_sync(boot, topic, 2), timeout_s=60, interval_s=0.2)
    await elect_preferred(boot, topic, 2)
    last = await moved(1, 2)

    for tip in tips:
        segments = await sidecars.finished(tip)
        # Copied by broker 2's sidecar, then broker 1's, then broker 2's again.
        by = [broker for broker, _ in itertools.groupby(s.broker_id for s in segments)]
        assert by == [2, 1, 2]
        await audit(
            sidecars, tip, [*produced[tip.partition], *more[tip.partition], *last[tip.partition]]
        )


def looks(telemetry, outcome: str) -> int:
    """Both sidecars' looks at the cluster with that outcome, as their counter says."""
    reader, _ = telemetry
    points = metric_points(reader, m.DISCOVERY_LOOKS.name, SCOPE)
    return sum(p.value for p in points if p.attributes.get("outcome") == outcome)


async def test_a_cluster_away_for_a_while_is_told_once_and_nothing_is_lost(
    sidecars, caplog, telemetry
):
    """Both brokers stop: each sidecar logs it once, keeps its partitions and asks again
    every look; they come back and copying goes on where it stopped."""
    caplog.set_level(logging.INFO, logger=DISCOVERY_LOG)
    boot, brokers = sidecars.bootstrap, sidecars.brokers
    topic = unique("waited")
    tips = tips_of(topic, create_topic(boot, topic, replicas=[[1, 2], [2, 1]], config=TIERED), 2)
    before = await produce(boot, topic, 2)
    for tip in tips:
        await sidecars.tiered_to_rolled_end(1 + tip.partition, tip)

    def told(start: str) -> list[str]:
        lines = [r.getMessage() for r in caplog.records if r.name == DISCOVERY_LOG]
        return [line for line in lines if line.startswith(start)]

    away = {
        n: f"broker {n}'s discovery: Kafka at {b.bootstrap_servers}: " for n, b in brokers.items()
    }
    back = {
        n: f"broker {n}'s discovery: Kafka at {b.bootstrap_servers} answers again"
        for n, b in brokers.items()
    }
    unreachable = looks(telemetry, "unreachable")
    brokers[2].stop()
    brokers[1].stop()
    await eventually(lambda: all(told(line) for line in away.values()), timeout_s=30)
    # Away for at least one more look, which fails too.
    await asyncio.sleep(DISCOVERY_MIN_TIMEOUT_S + 1)
    for tip in tips:
        assert (
            await sidecars.schedulers[1 + tip.partition].client.partition_state(tip)
        ).role == pb.PARTITION_ROLE_LEADER
    await asyncio.to_thread(brokers[1].start)
    await asyncio.to_thread(brokers[2].start)
    await eventually(lambda: all(told(line) for line in back.values()), timeout_s=30)
    await eventually(
        lambda: in_sync(boot, topic, 2) and in_sync(boot, topic, 1), timeout_s=60, interval_s=0.2
    )
    await elect_preferred(boot, topic, 2)
    after = await produce(boot, topic, 2)
    for tip in tips:
        await sidecars.tiered_to_rolled_end(1 + tip.partition, tip)
        await audit(sidecars, tip, [*before[tip.partition], *after[tip.partition]])
    for n in brokers:
        assert len(told(away[n])) == 1
        assert len(told(back[n])) == 1
    # Each sidecar looked at least twice while the cluster was away: logged once.
    assert looks(telemetry, "unreachable") - unreachable >= 4
    assert looks(telemetry, "answered") > 0


async def test_deleting_a_topic_empties_the_store_and_spares_its_successor(sidecars):
    boot, remover = sidecars.bootstrap, sidecars.remover.client
    topic = unique("deleted")
    config = {"replicas": [[1, 2], [2, 1]], "config": TIERED}
    old = tips_of(topic, create_topic(boot, topic, **config), 2)
    await produce(boot, topic, 2)
    for tip in old:
        await sidecars.tiered_to_rolled_end(1 + tip.partition, tip)
        assert sidecars.stack.objects_of(tip)

    await asyncio.to_thread(delete_topic, boot, topic)
    # Created again under its name at once: a new topic id, tiered as any other.
    new = tips_of(topic, await eventually(lambda: recreated(boot, topic, config)), 2)
    await produce(boot, topic, 2)

    async def emptied() -> bool:
        try:
            states = [(await remover.deletion_status(tip)).state for tip in old]
        except UnknownTopicOrPartitionError:
            return False  # not marked yet: two looks must miss the topic first
        return states == [RemotePartitionDeleteState.DELETE_PARTITION_FINISHED] * 2

    await eventually(emptied, timeout_s=60, interval_s=0.2)
    for tip in old:
        assert sidecars.stack.objects_of(tip) == {}
        # Marked once, by one of the two sidecars.
        assert lifecycle(events_of(boot, tip)).count("DELETE_PARTITION_MARKED") == 1
        for scheduler in sidecars.schedulers.values():
            with pytest.raises(UnknownTopicOrPartitionError):
                await scheduler.client.partition_state(tip)
    for tip in new:
        await sidecars.tiered_to_rolled_end(1 + tip.partition, tip)
        assert sidecars.stack.objects_of(tip)
        with pytest.raises(UnknownTopicOrPartitionError):
            await remover.deletion_status(tip)


def recreated(bootstrap: str, topic: str, config: dict) -> uuid.UUID | None:
    """The topic created again, or None while Kafka still finishes deleting it."""
    try:
        return create_topic(bootstrap, topic, **config)
    except Exception:  # TOPIC_ALREADY_EXISTS until the deletion is through
        return None


@pytest.mark.parametrize("way_in", WAYS_IN)
def test_the_cluster_is_read_through_each_way_into_a_secured_broker(
    secured_broker, way_in, tmp_path
):
    """Discovery's Kafka settings are the metadata manager's: SASL_SSL and mutual TLS."""
    broker = secured_broker.broker
    topic = unique("secured")
    topic_id = create_topic(broker.bootstrap_servers, topic, partitions=2, config=RETAINED)
    settings = load_properties(
        CopySchedulerConfig, tmp_path / "discovery.properties", secured_broker.settings(way_in)
    )
    view = KafkaCluster(kafka_client_config(settings), 30).view(broker.node_id)
    found = view.topics[topic]
    assert found.topic_id == topic_id
    assert {p: v.replicas for p, v in found.partitions.items()} == {0: (1,), 1: (1,)}
    assert {k: found.configs[k] for k in RETAINED} == RETAINED
    assert found.configs["remote.storage.enable"] == "false"


# A principal that may see topics but not their configs: discovery's view is refused.
DESCRIBE_ONLY = {"discovery": "describe-only-secret"}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    """Kafka 4.4 with StandardAuthorizer: the tests' PLAINTEXT principal is a super
    user, the SCRAM user `discovery` may only Describe topics."""
    directory = tmp_path_factory.mktemp("acl-kafka")
    certificates = make_certificates(directory)
    broker = KafkaBroker(
        directory / "broker",
        tls=BrokerTls(certificates.server_cert, certificates.server_key, certificates.ca),
        sasl_users=SaslUsers(scram_sha_512=DESCRIBE_ONLY),
        properties={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        },
    )
    broker.start()
    try:
        describe = AclBinding(
            ResourceType.TOPIC,
            "*",
            ResourcePatternType.LITERAL,
            "User:discovery",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for future in admin.create_acls([describe]).values():
            future.result(30)
        yield SecuredBroker(broker, certificates)
    finally:
        broker.stop()


def test_a_refused_read_is_told_as_denied_not_as_an_unreachable_cluster(acl_broker, tmp_path):
    broker = acl_broker.broker
    topic = unique("guarded")
    create_topic(broker.bootstrap_servers, topic, config=RETAINED)
    ((user, secret),) = DESCRIBE_ONLY.items()
    settings = {
        "bootstrap.servers": broker.sasl_ssl_bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(acl_broker.certificates.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": secret,
    }
    config = load_properties(CopySchedulerConfig, tmp_path / "discovery.properties", settings)
    cluster = KafkaCluster(kafka_client_config(config), 30)
    # Describe is allowed: the topic is there, by name.
    assert cluster.topic_id(topic) is not None
    # DescribeConfigs is not: no view, and the error says what to grant.
    with pytest.raises(ClusterAccessDeniedError) as denied:
        cluster.view(broker.node_id)
    assert denied.value.code == "PERMISSION_DENIED"
    assert denied.value.metadata == {"request": "DescribeConfigs"}
    assert "needs Describe and DescribeConfigs" in str(denied.value)
    assert not isinstance(denied.value, KafkaUnavailableError)
