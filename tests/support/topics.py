"""Topics on the test broker: produced with known records, read back by a plain consumer."""

import uuid
from typing import ClassVar

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from remotelog.kafka.records import Record


def produce(bootstrap: str, topic: str, count: int, first: int = 0) -> None:
    """`count` records, each with its own timestamp: offsets from 0 on a new
    one-partition topic, or from `first` on the topic already holding as many."""
    if first == 0:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # Kept for ever: the records are stamped in 2023, so each append rolls a segment
        # past segment.ms and the broker's time retention (checked every second by
        # the test broker) deleted them under a slow test.
        kept = NewTopic(topic, 1, 1, config={"retention.ms": "-1"})
        admin.create_topics([kept])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for offset in range(first, first + count):
        producer.produce(topic, **as_produced(offset))
    assert producer.flush(30) == 0


def as_produced(offset: int) -> dict:
    headers = [("n", str(offset).encode())] if offset % 3 else []
    return {
        "key": f"k{offset}".encode(),
        "value": f"v{offset}".encode() * 5,
        "timestamp": 1_700_000_000_000 + offset,
        "headers": headers,
    }


def as_record(offset: int) -> Record:
    """The record `as_produced(offset)` describes, as the broker stores it."""
    produced = as_produced(offset)
    return Record(
        offset,
        produced["timestamp"],
        produced["key"],
        produced["value"],
        tuple(produced["headers"]),
    )


def read_to_end(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    isolation: str = "read_uncommitted",
    start: int = 0,
    poll_s: float = 10,
) -> list:
    """Every message of the partition from `start`, read by a group-less consumer up to
    its end, each poll waiting `poll_s` at most."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"plain-{uuid.uuid4().hex[:6]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, partition, start)])
    found = []
    try:
        while True:
            message = consumer.poll(poll_s)
            assert message is not None, f"{topic}-{partition}: the broker did not answer"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return found
            found.append(message)
    finally:
        consumer.close()


def broker_records(bootstrap: str, topic: str) -> list[tuple]:
    """The topic's records as a plain consumer of the broker reads them."""
    return [
        (m.offset(), m.key(), m.value(), m.timestamp()[1], tuple(m.headers() or ()))
        for m in read_to_end(bootstrap, topic)
    ]


class OpenTransaction:
    """On a topic holding offsets 0-9 (`produce`): a committed transaction (10-12,
    its marker at 13), then one left open (14-16): the broker's last stable offset
    is 14 and its high watermark 17 until `abort()`."""

    COMMITTED: ClassVar[list[int]] = list(range(13))  # read_committed: below the marker
    LAST_STABLE = 14
    HIGH_WATERMARK = 17

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"txn-{topic}"}
        )
        self.producer.init_transactions(30)
        for offsets, commit in ((range(10, 13), True), (range(14, 17), False)):
            self.producer.begin_transaction()
            for offset in offsets:
                self.producer.produce(topic, **as_produced(offset))
            assert self.producer.flush(30) == 0
            if commit:
                self.producer.commit_transaction(30)

    def abort(self) -> None:
        self.producer.abort_transaction(30)
