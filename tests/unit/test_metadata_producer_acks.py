"""A metadata write acknowledged without its offset is reported as retriable, not awaited.

librdkafka's idempotent producer acknowledges a retried batch that the broker
already had (DUPLICATE_SEQUENCE_NUMBER) with no offset; the chaos soak met it
after broker restarts. A broker answering so on cue cannot run here, so the
producer stands in: it acknowledges each record with the offset it is given."""

import time

import pytest

from remotelog.core.errors import MetadataTopicUnavailableError
from remotelog.metadata import topic as topic_module
from remotelog.metadata.topic import MetadataProducer


class AcknowledgingProducer:
    offset: int | None = None

    def __init__(self, config):
        self.pending = []

    def produce(self, topic, value, partition, on_delivery, key=None):
        self.pending.append(on_delivery)

    def poll(self, timeout):
        while self.pending:
            self.pending.pop()(None, Delivered(AcknowledgingProducer.offset))
        time.sleep(min(timeout, 0.01))

    def flush(self, timeout=None):
        self.poll(0)


class Delivered:
    def __init__(self, offset):
        self._offset = offset

    def offset(self):
        return self._offset


@pytest.fixture
def producer(monkeypatch):
    monkeypatch.setattr(topic_module, "Producer", AcknowledgingProducer)
    producer = MetadataProducer({}, topic="__remote_log_metadata", timeout_ms=5000)
    yield producer
    producer.close()


async def test_an_acknowledgement_with_its_offset_returns_the_offset(producer, monkeypatch):
    monkeypatch.setattr(AcknowledgingProducer, "offset", 41)
    assert await producer.publish(3, b"event") == 41


async def test_an_acknowledgement_without_an_offset_asks_for_a_retry(producer, monkeypatch):
    monkeypatch.setattr(AcknowledgingProducer, "offset", None)
    with pytest.raises(MetadataTopicUnavailableError, match=r"without its offset.*retry"):
        await producer.publish(3, b"event")
