"""A broker rebuilt from the remote tier: KIP-405's test case 3, on two brokers.

Two KRaft brokers, both with the plugin, tier a replicated topic through one set of
services. Broker 2, the preferred leader, is stopped and its data directory
deleted, then started again under a running producer: it must rebuild its
replicas from the leader's local log start (or, with KIP-1023's
follower.fetch.last.tiered.offset.enable, from the last tiered offset), taking
its leader-epoch cache and producer state from the remote tier through the
plugin, and fetch only the untiered tail. Then it leads, and a consumer reads
every record from offset 0 through it, the tiered part through its own plugin.
"""

import asyncio
import os
import signal
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

import pytest_asyncio
from confluent_kafka import Producer
from support.kafka_admin import PAIR, elect_preferred, in_sync, leaders
from support.kafka_cluster import KafkaNode
from support.services import BackendStack, started
from support.serving import serve_in_background
from support.topics import read_to_end
from support.waiting import eventually

from remotelog.dev.broker import free_port
from remotelog.dev.kafka_broker import KafkaBroker

from .conftest import SEGMENT_BYTES, stop_brokers, tiering_broker
from .test_kafka_tiers import (
    PARTITIONS,
    TIERING_TIMEOUT_S,
    Produced,
    as_read,
    create_tiered_topic,
    wait_for_offsets,
)

KIP_1023 = "follower.fetch.last.tiered.offset.enable"
# Broker 2 is every partition's preferred leader.
REPLICAS = [[2, 1]] * PARTITIONS
HISTORY_RECORDS = 8000  # 1 KiB values a partition: 8 segments each
TXN_RECORDS = 40
# The leader keeps its last 3 MiB a partition on disk, tiered or not: a follower
# starting from the leader's local log start fetches the tiered part of it too.
LOCAL_RETENTION_BYTES = 3 * SEGMENT_BYTES
METRICS = "kafka.server:type=BrokerTopicMetrics"
REPLICATION_BYTES = f"{METRICS},name=ReplicationBytesInPerSec"
# Bytes the rebuilt broker may fetch beyond the topic's: the internal topics' records.
SLACK_BYTES = 1024 * 1024


@dataclass
class Pair:
    first: KafkaNode  # node 1: broker and the controller
    second: KafkaNode  # node 2: a broker only, the one rebuilt
    stack: BackendStack

    @property
    def bootstrap(self) -> str:
        return self.first.bootstrap_servers


@pytest_asyncio.fixture(scope="module")
async def kafka_pair(tmp_path_factory, s3_endpoint):
    tmp = tmp_path_factory.mktemp("kafka-pair")
    store, metadata = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    first = tiering_broker(tmp / "1", store, metadata, **PAIR).start()
    node = {"node_id": 2, "quorum": first, "jmx_port": free_port()}
    second = tiering_broker(tmp / "2", store, metadata, node, **PAIR)
    stack = BackendStack(
        tmp,
        first.bootstrap_servers,
        s3_endpoint,
        store_listen=store,
        metadata_listen=metadata,
        kafka_settings={"remote.log.metadata.topic.replication.factor": "2"},
    )
    try:
        second.start()
        async with started(stack):
            try:
                yield Pair(first, second, stack)
            finally:
                await stop_brokers(second, first)  # before the services they call
    finally:
        second.stop()
        first.stop()


class Traffic:
    """An idempotent producer writing to every partition from a thread until stopped,
    across restarts and leader changes: what it wrote, by partition, in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
        )
        self.values: dict[int, list[bytes]] = defaultdict(list)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def written_bytes(self) -> int:
        return sum(len(v) for values in list(self.values.values()) for v in list(values))

    def _run(self) -> None:
        def delivered(error, message) -> None:
            if error is not None:
                self.errors.append(str(error))

        while not self._stop.wait(0.05):  # about 60 KiB/s
            for partition in range(PARTITIONS):
                value = os.urandom(1024)
                self.producer.produce(self.topic, value, partition=partition, on_delivery=delivered)
                self.values[partition].append(value)
            self.producer.poll(0)

    def stop(self) -> dict[int, list[bytes]]:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(60) == 0
        assert self.errors == []
        return self.values


def produce_history(bootstrap: str, topic: str) -> Produced:
    """Plain records, a committed and an aborted transaction, then plain records again,
    so that both transactions end up in tiered segments."""
    produced = Produced()

    def send(producer: Producer, name: str, count: int, aborted: bool = False) -> None:
        for number in range(count):
            for partition in range(PARTITIONS):
                key, value = f"{name}-{number}".encode(), os.urandom(1024)
                producer.produce(topic, value, key, partition=partition)
                produced.records[partition].append((key, value, (), aborted))
        assert producer.flush(60) == 0

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    send(plain, "before", HISTORY_RECORDS // 2)
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    transactional.init_transactions(30)
    for commit in (True, False):
        transactional.begin_transaction()
        send(transactional, "txn", TXN_RECORDS, aborted=not commit)
        if commit:
            transactional.commit_transaction(30)
        else:
            transactional.abort_transaction(30)
    send(plain, "after", HISTORY_RECORDS // 2)
    return produced


def first_local_offsets(broker: KafkaBroker, topic: str) -> dict[int, int]:
    """Each partition's first offset on the broker's disk: its first segment's name."""
    return {p: min(segment_sizes(broker, topic, p)) for p in range(PARTITIONS)}


def segment_sizes(broker: KafkaBroker, topic: str, partition: int) -> dict[int, int]:
    """The partition's segments on the broker's disk: base offset to size."""
    return {
        int(path.stem): path.stat().st_size
        for path in (broker.data_dir / f"{topic}-{partition}").glob("*.log")
    }


def topic_count(broker: KafkaNode, name: str, topic: str) -> float:
    """A BrokerTopicMetrics meter's count for the topic (0 before its first mark)."""
    return sum(broker.jmx(f"{METRICS},name={name},topic={topic}").values())


@dataclass
class Rebuilt:
    """A rebuild of broker 2. Before its start: the leader's earliest local and latest
    tiered offsets, and the bytes of its log on disk, all of it and the untiered part.
    After it: broker 2's first local offsets, the bytes it fetched from the leader, the
    bytes the producer wrote meanwhile, and the aux states it built from the tier."""

    leader_local: dict[int, int]
    leader_tiered: dict[int, int]
    leader_bytes: int
    leader_untiered_bytes: int
    first_local: dict[int, int] = field(default_factory=dict)
    replicated: float = 0.0
    produced_meanwhile: int = 0
    aux_states: float = 0.0

    @property
    def fetch_bound(self) -> int:
        """At most what the follower may fetch starting from the leader's local start."""
        return self.leader_bytes + self.produced_meanwhile + SLACK_BYTES


def leader_state(pair: Pair, topic: str) -> Rebuilt:
    leader = pair.first
    tiered = leader.list_offsets(topic, "latest-tiered")
    sizes = {p: segment_sizes(leader, topic, p) for p in range(PARTITIONS)}
    return Rebuilt(
        leader.list_offsets(topic, "earliest-local"),
        tiered,
        sum(size for p in sizes.values() for size in p.values()),
        sum(size for p, s in sizes.items() for base, size in s.items() if base > tiered[p]),
    )


async def rebuild(
    pair: Pair, topic: str, traffic: Traffic, last_tiered: bool, while_down=None
) -> Rebuilt:
    """Broker 2 stopped, its data deleted, and started again with KIP-1023 on or off,
    until it is back in every partition's ISR; `while_down` (a coroutine function)
    runs after its start, before that wait."""
    second = pair.second
    await asyncio.to_thread(second.stop)
    await asyncio.to_thread(second.wipe)
    found = await asyncio.to_thread(leader_state, pair, topic)
    written = traffic.written_bytes
    second.properties = {**second.properties, KIP_1023: str(last_tiered).lower()}
    await asyncio.to_thread(second.start)
    if while_down is not None:
        await while_down()

    async def caught_up() -> bool:
        return await asyncio.to_thread(in_sync, pair.bootstrap, topic, 2)

    await eventually(caught_up, timeout_s=TIERING_TIMEOUT_S, interval_s=0.5)
    found.first_local = first_local_offsets(second, topic)
    aux_states = f"{METRICS},name=BuildRemoteLogAuxStateRequestsPerSec,topic={topic}"
    counts = await asyncio.to_thread(second.jmx, REPLICATION_BYTES, aux_states)
    found.replicated = counts[REPLICATION_BYTES]
    found.aux_states = counts[aux_states]
    found.produced_meanwhile = traffic.written_bytes - written
    return found


async def test_a_wiped_broker_rebuilds_from_the_remote_tier_and_then_leads(kafka_pair):
    pair = kafka_pair
    bootstrap = pair.first.bootstrap_servers
    topic = f"rebuilt-{uuid.uuid4().hex[:6]}"
    retention = {"local.retention.ms": "-2", "local.retention.bytes": str(LOCAL_RETENTION_BYTES)}
    await asyncio.to_thread(create_tiered_topic, bootstrap, topic, REPLICAS, **retention)
    produced = await asyncio.to_thread(produce_history, bootstrap, topic)
    # Most of the history tiered, and deleted from both brokers' disks.
    tiered_past = HISTORY_RECORDS // 2
    await asyncio.to_thread(
        wait_for_offsets,
        pair.first,
        topic,
        "earliest-local",
        lambda o: min(o.values()) > tiered_past,
        "tiered",
    )
    traffic = Traffic(bootstrap, topic)

    # KIP-405: the empty follower fetches from the leader's local log start, after
    # building its leader epochs and producer state from the segment below it. The
    # store is killed before the rebuilt broker asks for those indexes: the rebuild
    # fails, is retried, and finishes once the store is back, with nothing lost.
    config = pair.stack.tmp / f"{pair.stack.backend}.properties"
    await pair.stack.stop_store()
    store = await asyncio.to_thread(
        serve_in_background, "segment-store", config, pair.stack.tmp / "killed-store.log"
    )
    store.send_signal(signal.SIGKILL)
    store.wait()

    async def failing_then_back() -> None:
        async def failed() -> bool:
            return bool(
                await asyncio.to_thread(
                    topic_count, pair.second, "BuildRemoteLogAuxStateErrorsPerSec", topic
                )
            )

        await eventually(failed, timeout_s=TIERING_TIMEOUT_S, interval_s=0.5)
        assert not await asyncio.to_thread(in_sync, pair.bootstrap, topic, 2)
        await pair.stack.start_store()

    from_local = await rebuild(pair, topic, traffic, False, while_down=failing_then_back)
    # KIP-1023: from the offset after the last tiered one; the tiered part of the
    # leader's disk is not fetched again.
    from_tiered = await rebuild(pair, topic, traffic, last_tiered=True)
    for rebuilt in (from_local, from_tiered):
        # Local retention freed the leader's disk: of its tiered part it keeps
        # local.retention.bytes and the segment that straddles it, and one more segment
        # tiered since the last retention check.
        tiered_on_disk = rebuilt.leader_bytes - rebuilt.leader_untiered_bytes
        assert tiered_on_disk <= PARTITIONS * (LOCAL_RETENTION_BYTES + 2 * SEGMENT_BYTES)
        assert 0 < rebuilt.replicated <= rebuilt.fetch_bound
        assert rebuilt.aux_states >= PARTITIONS  # one per partition, from the remote tier
        for partition in range(PARTITIONS):
            assert rebuilt.first_local[partition] >= rebuilt.leader_local[partition] > tiered_past
    for partition in range(PARTITIONS):
        # From the leader's local start: its tiered segments on disk too.
        assert from_local.first_local[partition] <= from_local.leader_tiered[partition]
        # From the last tiered offset: only what was never tiered.
        assert from_tiered.first_local[partition] > from_tiered.leader_tiered[partition]
    assert from_tiered.replicated <= (
        from_tiered.leader_untiered_bytes + from_tiered.produced_meanwhile + SLACK_BYTES
    )
    assert from_tiered.replicated < from_local.replicated

    # Broker 2 leads again; the producers go on writing, through it.
    await elect_preferred(pair.bootstrap, topic, PARTITIONS)

    async def led_by_second() -> bool:
        found = await asyncio.to_thread(leaders, pair.bootstrap, topic)
        return set(found.values()) == {2}

    await eventually(led_by_second, timeout_s=60, interval_s=0.5)
    last = await asyncio.to_thread(commit_one_more, pair.second.bootstrap_servers, topic)
    written = await asyncio.to_thread(traffic.stop)

    # From offset 0 through broker 2: the tiered part through its plugin, the rest from
    # its disk, each record as it was produced, the aborted ones only when asked.
    for partition in range(PARTITIONS):
        for isolation, committed_only in (("read_committed", True), ("read_uncommitted", False)):
            messages = await asyncio.to_thread(
                read_to_end, pair.second.bootstrap_servers, topic, partition, isolation
            )
            assert messages[0].offset() == 0
            history = produced.expected(partition, committed_only)
            assert as_read(messages[: len(history)]) == history, isolation
            rest = messages[len(history) :]
            assert [m.value() for m in rest if m.key() is None] == written[partition]
            assert [m.value() for m in rest if m.key() is not None] == [last[partition]]


def commit_one_more(bootstrap: str, topic: str) -> list[bytes]:
    """A transaction of one record a partition by the history's transactional id: its
    producer state came from the remote tier to the broker that now leads."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    values = [os.urandom(1024) for _ in range(PARTITIONS)]
    for partition, value in enumerate(values):
        producer.produce(topic, value, b"last", partition=partition)
    producer.commit_transaction(30)
    return values
