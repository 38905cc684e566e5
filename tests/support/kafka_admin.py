"""Topics, leaders and ISRs of a real Kafka cluster of one or two KRaft brokers, through
librdkafka's admin client.

Each helper keeps its client alive until the answer arrives: librdkafka cancels the
requests of a client that is dropped first.
"""

import asyncio
import os
import time
import uuid

from confluent_kafka import ElectionType, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from remotelog.core.kafka_client import uuid_of

# Two brokers that both hold every internal topic, whose leadership moves when the
# test says (not at Kafka's five-minute rebalance).
PAIR = {
    "offsets.topic.replication.factor": "2",
    "transaction.state.log.replication.factor": "2",
    "auto.leader.rebalance.enable": "false",
}


def admin_of(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    topic: str,
    *,
    partitions: int = 1,
    replicas: list[list[int]] | None = None,
    config: dict[str, str] | None = None,
) -> uuid.UUID:
    """A topic of `partitions` single replicas, or on `replicas` (node ids, the preferred
    leader first); its id, once the broker answers for it."""
    admin = admin_of(bootstrap)
    settings = config or {}
    new = (
        NewTopic(topic, len(replicas), replica_assignment=replicas, config=settings)
        if replicas
        else NewTopic(topic, partitions, 1, config=settings)
    )
    admin.create_topics([new])[topic].result(30)
    for _ in range(100):  # until the new topic's metadata reached the broker
        try:
            described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
            return uuid_of(described.topic_id)
        except KafkaException:
            time.sleep(0.1)
    raise AssertionError(f"{topic} was created but {bootstrap} does not describe it")


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = admin_of(bootstrap)
    admin.delete_topics([topic])[topic].result(30)


def delete_topic_until_gone(bootstrap: str, topic: str, timeout_s: float = 60) -> None:
    """Delete the topic (through the controller, in KRaft) and wait until no broker
    describes it: a topic of the same name created next is a new one."""
    delete_topic(bootstrap, topic)
    deadline = time.monotonic() + timeout_s
    while describe(bootstrap, topic) is not None:
        assert time.monotonic() < deadline, f"{topic} is still described after its deletion"
        time.sleep(0.5)


def describe(bootstrap: str, topic: str):
    """The topic's description, or None when the asked broker could not give it."""
    admin = admin_of(bootstrap)
    try:
        return admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    except KafkaException:
        return None  # a broker stopping, or the topic not there (yet)


def in_sync(bootstrap: str, topic: str, node_id: int) -> bool:
    """Whether `node_id` is in the ISR of every partition of the topic."""
    described = describe(bootstrap, topic)
    return described is not None and all(
        node_id in [n.id for n in p.isr] for p in described.partitions
    )


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader's node id (-1 without one); empty when not described."""
    described = describe(bootstrap, topic)
    if described is None:
        return {}
    return {p.id: p.leader.id if p.leader is not None else -1 for p in described.partitions}


async def elect_preferred(bootstrap: str, topic: str, partitions: int) -> None:
    """A preferred-leader election of the topic's partitions."""
    admin = admin_of(bootstrap)
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    await asyncio.to_thread(admin.elect_leaders(ElectionType.PREFERRED, wanted).result)


def set_topic_config(bootstrap: str, topic: str, key: str, value: int | str) -> None:
    admin = admin_of(bootstrap)
    entry = ConfigEntry(key, str(value), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("TOPIC", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)


def produce_random(
    bootstrap: str,
    topic: str,
    records: int,
    partitions: int,
    *,
    keyed: bool = False,
    batch_bytes: int = 1_000_000,
) -> dict[int, list[bytes]]:
    """`records` incompressible 1 KiB values to each partition, through an idempotent
    producer (one copy of each, in order; keyed: each record's key is its offset in
    a new topic); the values by partition. A topic's segments must hold a batch."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "batch.size": batch_bytes}
    )
    values: dict[int, list[bytes]] = {partition: [] for partition in range(partitions)}
    errors: list[str] = []

    def delivered(error, _message) -> None:
        if error is not None:
            errors.append(str(error))

    for number in range(records):
        key = str(number).encode() if keyed else None
        for partition in range(partitions):
            value = os.urandom(1024)
            producer.produce(topic, value, key, partition=partition, on_delivery=delivered)
            values[partition].append(value)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == [], errors[:3]
    return values
