"""The `__remote_log_metadata` topic through confluent-kafka: creation, producer, consumer thread.

confluent-kafka's clients block, so each runs in its own thread and talks to
the event loop only through `call_soon_threadsafe`; the manager's state is
touched by the loop thread alone. Kafka's ProducerManager / ConsumerTask split.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from remotelog.core.errors import InvalidArgumentError, MetadataTopicUnavailableError
from remotelog.core.kafka_client import connection_problem, uuid_of
from remotelog.core.metadata_serde import deserialize
from remotelog.core.model import RemoteLogMetadata

log = logging.getLogger(__name__)
# librdkafka's own log lines go through Python logging, not straight to stderr.
_LIBRDKAFKA_LOG = logging.getLogger("remotelog.metadata.librdkafka")

METADATA_TOPIC = "__remote_log_metadata"
OFFSET_BEGINNING = -2  # librdkafka's logical offset
_STOP_POLL_S = 0.2
# How long the consumer thread waits before starting over after an unexpected failure.
_RESTART_S = 1.0


class TopicWaitStopped(Exception):
    """A wait for the metadata topic was stopped (its caller was cancelled)."""


@dataclass(frozen=True)
class TopicInfo:
    topic_id: uuid.UUID
    partitions: int


def ensure_metadata_topic(
    client_config: dict[str, Any],
    *,
    partitions: int,
    replication_factor: int,
    retention_ms: int,
    retry_interval_ms: int,
    max_timeout_ms: int,
    topic: str = METADATA_TOPIC,
    stopped: threading.Event | None = None,
    compacted: bool = False,
) -> TopicInfo:
    """Create the topic if missing (Kafka's initializeResources), then check its partition count.

    Retries every `retry_interval_ms` until `max_timeout_ms` (the broker may
    still be starting), or until `stopped` is set (TopicWaitStopped). Blocking:
    run it in a thread (`in_thread_until_cancelled`). `compacted`: for keyed records
    (KIP-1266), compaction beside retention.
    """
    request = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config={
            "retention.ms": str(retention_ms),
            "cleanup.policy": "compact,delete" if compacted else "delete",
        },
    )
    return _describe(
        client_config, topic, partitions, retry_interval_ms, max_timeout_ms, request, stopped
    )


def await_metadata_topic(
    client_config: dict[str, Any],
    *,
    partitions: int,
    retry_interval_ms: int,
    max_timeout_ms: int,
    topic: str = METADATA_TOPIC,
    stopped: threading.Event | None = None,
) -> TopicInfo:
    """Wait for the metadata manager to have created the topic; check its partition count.

    For readers of the topic (the partition remover) that must not create it
    with settings only the metadata manager knows. Blocking, stopped by
    `stopped`, as ensure_metadata_topic.
    """
    return _describe(
        client_config, topic, partitions, retry_interval_ms, max_timeout_ms, None, stopped
    )


def _describe(
    client_config: dict[str, Any],
    topic: str,
    partitions: int,
    retry_interval_ms: int,
    max_timeout_ms: int,
    create: NewTopic | None,
    stopped: threading.Event | None,
) -> TopicInfo:
    stopped = stopped or threading.Event()

    connection_errors: list[KafkaError] = []
    admin_config: dict[str, Any] = {
        **client_config,
        "logger": _LIBRDKAFKA_LOG,
        "error_cb": connection_errors.append,
    }
    admin = AdminClient(admin_config)

    def refuse_misconfiguration() -> None:
        """Raise at once for a connection error no retry fixes (a refused login...)."""
        admin.poll(0)  # serves error_cb
        for error in connection_errors:
            problem = connection_problem(error.name(), error.str(), client_config)
            if problem is not None:
                raise problem from None

    def result(future: Future[Any]) -> Any:
        # A request may take up to its timeout; a stop, or a connection error that
        # names a setting, is seen within a fraction of it.
        while True:
            if stopped.is_set():
                raise TopicWaitStopped(topic)
            refuse_misconfiguration()
            with contextlib.suppress(FutureTimeout):
                return future.result(timeout=_STOP_POLL_S)

    deadline = time.monotonic() + max_timeout_ms / 1000
    last_error: object = None
    while time.monotonic() < deadline:
        timeout = max(0.1, min(10.0, deadline - time.monotonic()))
        try:
            if create is not None:
                future = admin.create_topics([create], request_timeout=timeout)[topic]
                try:
                    result(future)
                    log.info("created %s with %d partitions", topic, partitions)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
            description = result(
                admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
            )
        except KafkaException as exc:
            last_error = exc
            refuse_misconfiguration()
            if connection_errors:
                last_error = connection_errors[-1].str()
                connection_errors.clear()
            if stopped.wait(retry_interval_ms / 1000):
                raise TopicWaitStopped(topic) from None
            continue
        found = len(description.partitions)
        if found != partitions:
            raise InvalidArgumentError(
                "remote.log.metadata.topic.num.partitions",
                f"is {partitions} but the existing topic {topic} has {found} partitions; "
                "set it to the topic's partition count",
            )
        return TopicInfo(uuid_of(description.topic_id), found)
    verb = "create or describe" if create is not None else "find"
    raise MetadataTopicUnavailableError(
        f"could not {verb} {topic} through bootstrap.servers="
        f"{client_config.get('bootstrap.servers')} within {max_timeout_ms} ms: {last_error}"
    )


# Errors after which this producer id can never write again: replace the producer.
_PRODUCER_STATE_LOST = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.UNKNOWN_PRODUCER_ID,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    }
)


class MetadataProducer:
    """Kafka's ProducerManager: acks=all, idempotent, explicit partition, null key.

    An idempotent producer fails for good ("fatal") when the broker no longer
    knows its producer id, e.g. after a broker restart that lost producer
    state (Tansu answers ProducerFenced). The producer is then replaced: the
    new one has a new producer id, and metadata writes are idempotent anyway.
    """

    def __init__(self, client_config: dict[str, Any], *, topic: str, timeout_ms: int) -> None:
        self.topic = topic
        self._config = {
            **client_config,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "message.timeout.ms": timeout_ms,
            "logger": _LIBRDKAFKA_LOG,
            "error_cb": self._on_error,
        }
        self._fatal = threading.Event()
        self._producer = Producer(self._config)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="rlmm-producer", daemon=True)
        self._thread.start()

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal.set()

    def _poll(self) -> None:
        while not self._closing.is_set():
            self._producer.poll(0.05)

    def _replace_if_failed(self) -> None:
        if not self._fatal.is_set():
            return
        self._fatal.clear()
        log.warning("the metadata producer's id is no longer valid; replacing the producer")
        old, self._producer = self._producer, Producer(self._config)
        # Fail what the old one still holds (their writers time out and retry).
        threading.Thread(target=old.flush, args=(0,), daemon=True).start()

    async def publish(self, partition: int, value: bytes | None, key: bytes | None = None) -> int:
        """Returns the record's offset once the broker acknowledged it (acks=all). A None
        value is a tombstone (KIP-1266 keyed records only)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()

        def settle(err: KafkaError | None, offset: int | None) -> None:
            if future.done():
                return
            if err is not None:
                future.set_exception(
                    MetadataTopicUnavailableError(f"metadata record not written: {err.str()}")
                )
            elif offset is None or offset < 0:
                # librdkafka acknowledges a retried batch the broker already had
                # (DUPLICATE_SEQUENCE_NUMBER) without its offset: the record is in the
                # log, but where is unknown, so it can not be awaited. The writer
                # retries; metadata writes are idempotent.
                future.set_exception(
                    MetadataTopicUnavailableError(
                        "metadata record acknowledged without its offset (a retried batch "
                        "the broker already had): it is written; retry to confirm"
                    )
                )
            else:
                future.set_result(offset)

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None and (err.fatal() or err.code() in _PRODUCER_STATE_LOST):
                self._fatal.set()
            loop.call_soon_threadsafe(settle, err, msg.offset())

        for attempt in range(2):
            self._replace_if_failed()
            try:
                self._producer.produce(
                    self.topic, value=value, key=key, partition=partition, on_delivery=on_delivery
                )
                break
            except KafkaException as exc:
                if attempt == 0 and exc.args[0].fatal():
                    self._fatal.set()
                    continue
                raise MetadataTopicUnavailableError(f"metadata record not queued: {exc}") from None
            except BufferError as exc:
                raise MetadataTopicUnavailableError(f"metadata record not queued: {exc}") from None
        return await future

    def close(self) -> None:
        self._closing.set()
        self._thread.join()
        self._producer.flush(5)
        # librdkafka destroys the client (threads, sockets) with the last reference.
        del self._producer


# A consumed record: metadata partition, assignment generation, offset, event
# (None when the value could not be parsed; the offset still counts).
Record = tuple[int, int, int, RemoteLogMetadata | None]
# The end of a partition was reached: partition, generation, end offset.
EndOfPartition = tuple[int, int, int]
Sink = Callable[[list[Record], list[EndOfPartition]], None]


class MetadataConsumer:
    """Kafka's ConsumerTask: a thread assigned to metadata partitions, no consumer group.

    Records are parsed in this thread and handed to `sink` on the event loop,
    at most two batches in flight. Each assignment carries a generation, so a
    batch polled before a partition was re-assigned is recognisable and dropped.
    End of partition (librdkafka's PARTITION_EOF, computed from the fetch
    response, not from ListOffsets) tells the loop a partition is caught up.
    """

    def __init__(
        self,
        client_config: dict[str, Any],
        *,
        topic: str,
        loop: asyncio.AbstractEventLoop,
        sink: Sink,
        fetch_wait_ms: int,
    ) -> None:
        self.topic = topic
        self._loop = loop
        self._sink = sink
        self._config = {
            **client_config,
            # confluent-kafka insists on a group id; it is never joined or committed.
            "group.id": f"remotelog-rlmm-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": fetch_wait_ms,
            "logger": _LIBRDKAFKA_LOG,
        }
        self._commands: list[tuple[str, int, int, int]] = []
        self._generations: dict[int, int] = {}
        # Per assigned partition: the offset to resume from (the next not yet delivered).
        self._positions: dict[int, int] = {}
        # Per assigned partition: the position last said to be its end.
        self._ended: dict[int, int] = {}
        self._lock = threading.Lock()
        self._in_flight = threading.BoundedSemaphore(2)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlmm-consumer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def assign(self, partition: int, offset: int, generation: int) -> None:
        with self._lock:
            self._commands.append(("assign", partition, offset, generation))

    def unassign(self, partition: int) -> None:
        with self._lock:
            self._commands.append(("unassign", partition, 0, 0))

    def close(self) -> None:
        self._closing.set()
        self._thread.join()

    def _apply_commands(self, consumer: Consumer) -> None:
        with self._lock:
            commands, self._commands = self._commands, []
        for action, partition, offset, generation in commands:
            tp = KafkaTopicPartition(self.topic, partition, offset)
            self._ended.pop(partition, None)
            if action == "assign":
                if partition in self._generations:
                    consumer.incremental_unassign([KafkaTopicPartition(self.topic, partition)])
                consumer.incremental_assign([tp])
                self._generations[partition] = generation
                self._positions[partition] = offset
            elif self._generations.pop(partition, None) is not None:
                self._positions.pop(partition, None)
                consumer.incremental_unassign([KafkaTopicPartition(self.topic, partition)])

    def _run(self) -> None:
        # A dead thread would leave every partition it serves loading for ever: an
        # unexpected failure is logged and the consumer starts over where delivery
        # stopped, with the same generations (nothing delivered is delivered twice).
        while not self._closing.is_set():
            consumer = Consumer(self._config)
            try:
                self._consume(consumer)
            except Exception:
                log.exception("metadata consumer failed; restarting it in %.1f s", _RESTART_S)
                self._resume_after_failure()
                self._closing.wait(_RESTART_S)
            finally:
                consumer.close()

    def _resume_after_failure(self) -> None:
        with self._lock:
            resumed = [
                ("assign", partition, self._positions[partition], generation)
                for partition, generation in self._generations.items()
            ]
            self._commands = resumed + self._commands
            self._generations.clear()

    def _consume(self, consumer: Consumer) -> None:
        while not self._closing.is_set():
            self._apply_commands(consumer)
            if not self._generations:
                time.sleep(0.01)
                continue
            # consume() would wait out its whole timeout for a full batch:
            # wait for the first message only, then take what is already there.
            first = consumer.poll(0.05)
            if first is None:
                reached = self._past_high_watermark(consumer)
                if reached:
                    self._deliver([], reached)
                continue
            messages = [first, *consumer.consume(num_messages=999, timeout=0)]
            records: list[Record] = []
            ends: list[EndOfPartition] = []
            for message in messages:
                partition, offset = message.partition(), message.offset()
                generation = self._generations.get(partition) if partition is not None else None
                if generation is None or partition is None or offset is None:
                    continue
                error = message.error()
                if error is None:
                    records.append((partition, generation, offset, _parse(message)))
                elif error.code() == KafkaError._PARTITION_EOF:
                    ends.append((partition, generation, offset))
                else:
                    log.warning("metadata consumer: %s", error.str())
            if records or ends:
                self._deliver(records, ends)
                for partition, _, offset, _ in records:
                    self._positions[partition] = offset + 1
                for partition, _, offset in ends:
                    self._positions[partition] = max(self._positions[partition], offset)
                    self._ended[partition] = self._positions[partition]

    def _past_high_watermark(self, consumer: Consumer) -> list[EndOfPartition]:
        """Partitions read up to or past the high watermark of their last fetch response
        and not yet said to be at their end there.

        librdkafka signals PARTITION_EOF only when the fetch position equals the high
        watermark; a broker answering a watermark below the position (Tansu, after a
        restart, for a last batch of several records) would leave the partition loading
        for ever. Kafka's ConsumerTask compares with >= too.
        """
        ends = []
        for partition, generation in self._generations.items():
            position = self._positions[partition]
            if position < 0 or self._ended.get(partition) == position:
                continue
            tp = KafkaTopicPartition(self.topic, partition)
            _, high = consumer.get_watermark_offsets(tp, cached=True)
            if 0 <= high <= position:
                ends.append((partition, generation, position))
                self._ended[partition] = position
        return ends

    def _deliver(self, records: list[Record], ends: list[EndOfPartition]) -> None:
        while not self._in_flight.acquire(timeout=0.1):
            if self._closing.is_set():
                return

        def run() -> None:
            try:
                self._sink(records, ends)
            finally:
                self._in_flight.release()

        try:
            self._loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop is closed: shutting down
            self._in_flight.release()


def _parse(message: Any) -> RemoteLogMetadata | None:
    value = message.value()
    if value is None:
        return None  # a tombstone of a compacted topic's keyed records (KIP-1266)
    where = f"{message.topic()}-{message.partition()} offset {message.offset()}"
    return parse_record(value, where)


def parse_record(value: bytes, where: str) -> RemoteLogMetadata | None:
    """The event a metadata record holds; None (logged) when it cannot be read."""
    try:
        return deserialize(value)
    except ValueError as exc:  # MetadataParseError, or a field out of range
        log.error("skipping unreadable record at %s: %s", where, exc)
        return None
