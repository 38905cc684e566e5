"""TieredConsumer: a partition's records, history from the remote tier, the tail from Kafka.

Offsets up to the partition's latest tiered offset come from the remote fetch
service (its bulk read; under read_committed its Fetch, whose aborted
transaction lists filter the records as Kafka's consumer does). Offsets above
it come from the Kafka broker when `bootstrap_servers` is given (assign and
seek, no consumer group), starting right after the last tiered offset: no gap
and no duplicate at the boundary. A read is bounded: it ends at `end_offset`,
or at what exists when it starts (the broker's high watermark, or without a
broker the latest tiered offset).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from remotelog.client.base import ClientOptions
from remotelog.client.log_readers import URL_PAUSE_S
from remotelog.client.metadata import MetadataClient
from remotelog.client.remote_fetch import FetchPartition, RemoteFetchClient
from remotelog.client.segment_files import SegmentFiles, batch_chunks, whole_segments
from remotelog.client.url_ranges import HEDGE_PERCENTILE, UrlRangeReader
from remotelog.client.url_reader import UrlReadUnavailable
from remotelog.core.errors import (
    InvalidArgumentError,
    OffsetOutOfRangeError,
    RemoteLogError,
    RemoteResourceNotFoundError,
)
from remotelog.core.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemotePartitionSummary,
    TopicIdPartition,
)
from remotelog.core.tasks import cancel_and_wait
from remotelog.kafka.consumer_records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    AbortedTransactions,
    ConsumerRecord,
    FetchedRecords,
    fetched_records,
)
from remotelog.kafka.records import iter_batches


@dataclass(frozen=True)
class AtTimestamp:
    """Start at the first record whose timestamp is at or after `timestamp_ms`."""

    timestamp_ms: int


Start = int | Literal["earliest", "latest"] | AtTimestamp
# A step of a read: records fetched from the remote tier, not decoded yet, or the
# records of one broker poll.
Chunk = FetchedRecords | list[ConsumerRecord]
log = logging.getLogger(__name__)
# Bytes per chunk of a segment file read on the store's host, when chunk_bytes is 0.
FILE_CHUNK_BYTES = 2 * 1024 * 1024
# Bytes asked per Fetch under read_committed (the bulk read streams instead).
FETCH_BYTES = 4 * 1024 * 1024
# Messages taken from the broker per poll.
BROKER_BATCH = 1000
# The topic id of a partition known only from the broker (Kafka's Uuid.ZERO_UUID):
# the broker's metadata answer does not carry one through confluent-kafka.
_NO_TOPIC_ID = uuid.UUID(int=0)


class TieredConsumer:
    """Bounded reads of partitions through the remote fetch service and, for the tail,
    the broker. `fetch` and `metadata` stay the caller's; use `connect` to have the
    consumer open (and close) its own."""

    def __init__(
        self,
        fetch: RemoteFetchClient,
        metadata: MetadataClient,
        *,
        bootstrap_servers: str | None = None,
        isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
        kafka_config: Mapping[str, Any] | None = None,
        group_id_prefix: str = "remotelog-tiered",
        chunk_bytes: int = 0,
        short_circuit_socket: str | None = None,
        fetch_urls: bool = True,
        hedge_percentile: float = HEDGE_PERCENTILE,
    ) -> None:
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise InvalidArgumentError(
                "isolation_level", f"{isolation_level!r}: read_uncommitted or read_committed"
            )
        self.fetch = fetch
        self.metadata = metadata
        self.bootstrap_servers = bootstrap_servers
        self.read_committed = isolation_level == "read_committed"
        self.kafka_config = dict(kafka_config or {})
        # The group id's prefix (the consumer never joins it), unless kafka_config names one.
        self.group_id_prefix = group_id_prefix
        # Bytes per chunk of a bulk read (0: the fetch service's default).
        self.chunk_bytes = chunk_bytes
        # On the segment store's host: whole segments read from its files (segment_files).
        self._segment_files = (
            SegmentFiles(
                short_circuit_socket, fetch.call_retrying, timeout_s=fetch.options.timeout_s
            )
            if short_circuit_socket
            else None
        )
        # The rest straight from object storage, by the URLs the fetch service locates
        # (url_ranges); off once the service says it hands out none.
        self._urls = (
            UrlRangeReader(
                fetch, timeout_s=fetch.options.timeout_s, hedge_percentile=hedge_percentile
            )
            if fetch_urls
            else None
        )
        self._urls_paused_until = 0.0
        self._owned: list[RemoteFetchClient | MetadataClient] = []

    @classmethod
    def connect(
        cls,
        fetch_address: str,
        metadata_address: str,
        *,
        options: ClientOptions | None = None,
        **kwargs: Any,
    ) -> TieredConsumer:
        fetch = RemoteFetchClient(fetch_address, options=options)
        metadata = MetadataClient(metadata_address, options=options)
        consumer = cls(fetch, metadata, **kwargs)
        consumer._owned = [fetch, metadata]
        return consumer

    async def close(self) -> None:
        if self._segment_files is not None:
            await self._segment_files.close()
        if self._urls is not None:
            await self._urls.close()
        for client in self._owned:
            await client.close()
        self._owned = []

    async def __aenter__(self) -> TieredConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def partitions(self, topic: str | None = None) -> list[RemotePartitionSummary]:
        """The partitions (of `topic`, or all) with data in the remote tier; with a
        broker, also the broker's partitions that have none yet, each summarised as
        nothing tiered below the broker's log start (internal `__` topics left out, as
        a Kafka consumer's pattern subscription leaves them)."""
        remote = await self.metadata.list_remote_partitions(topic)
        if not self.bootstrap_servers:
            return remote
        known = {(s.topic_id_partition.topic, s.topic_id_partition.partition) for s in remote}
        on_broker = await asyncio.to_thread(_broker_partitions, self._kafka_config(), topic)
        untiered = [
            RemotePartitionSummary(
                TopicIdPartition(_NO_TOPIC_ID, name, number),
                earliest_offset=log_start,
                latest_tiered_offset=log_start - 1,
                remote_bytes=0,
                segment_count=0,
            )
            for name, number, log_start in on_broker
            if (name, number) not in known
        ]
        return remote + untiered

    def _kafka_config(self) -> dict[str, Any]:
        """A group-less consumer's configuration: it assigns and seeks, never joins."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": f"{self.group_id_prefix}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if self.read_committed else "read_uncommitted",
            **self.kafka_config,
        }

    async def read(
        self,
        partition: TopicIdPartition,
        start: Start = "earliest",
        end_offset: int | None = None,
    ) -> AsyncGenerator[ConsumerRecord, None]:
        """The partition's records from `start` up to `end_offset` (exclusive), or up to
        what exists when the read gets there: the end of the broker's log (under
        read_committed its last stable offset), or without a broker the last tiered
        offset."""
        chunks = self.read_chunks(partition, start, end_offset)
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                for record in chunk:
                    yield record

    async def read_chunks(
        self,
        partition: TopicIdPartition,
        start: Start = "earliest",
        end_offset: int | None = None,
    ) -> AsyncGenerator[list[ConsumerRecord], None]:
        """The same records a list at a time (one per chunk fetched or broker poll)."""
        chunks = self.read_undecoded(partition, start, end_offset)
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield _decoded(chunk)

    async def read_undecoded(
        self,
        partition: TopicIdPartition,
        start: Start = "earliest",
        end_offset: int | None = None,
    ) -> AsyncGenerator[Chunk, None]:
        """The same records a chunk at a time, the remote tier's left undecoded: for a
        reader that decodes them into columns (FetchedRecords.columns)."""
        remote = await self._summary(partition)
        async with self._broker_tail(partition) as tail:
            position = await self._resolve(partition, start, remote, tail)
            if remote is not None and position <= remote.latest_tiered_offset:
                if position < remote.earliest_offset:
                    raise OffsetOutOfRangeError(
                        f"{partition}: offset {position} is below the remote tier's earliest "
                        f"offset {remote.earliest_offset} (deleted by retention)",
                        metadata={"partition": str(partition)},
                    )
                remote_end = remote.latest_tiered_offset + 1
                if end_offset is not None:
                    remote_end = min(end_offset, remote_end)
                async for fetched in self._remote(partition, position, remote_end):
                    yield fetched
                position = max(position, remote_end)
            if tail is not None and (end_offset is None or position < end_offset):
                async for chunk in tail.read(position, end_offset):
                    yield chunk

    async def end_offset(self, partition: TopicIdPartition) -> int:
        """Where a read started now would end: the broker's high watermark (under
        read_committed its last stable offset), without a broker the offset after the
        last tiered one."""
        remote = await self._summary(partition)
        async with self._broker_tail(partition) as tail:
            return await self._end(remote, tail)

    async def end_offsets(
        self, partitions: Sequence[TopicIdPartition]
    ) -> dict[TopicIdPartition, int]:
        """`end_offset` of each partition, the broker's asked through one consumer: a
        consumer per partition costs its connection and close, more than the lookups."""
        if not self.bootstrap_servers:
            return {tip: await self.end_offset(tip) for tip in partitions}
        return await asyncio.to_thread(_high_watermarks, self._kafka_config(), partitions)

    async def segment_ends(self, partition: TopicIdPartition) -> list[tuple[int, int]]:
        """Each readable remote segment's end (the offset right after it: where a reader
        can cut the partition's history without splitting a segment) and its bytes,
        ascending by end."""
        ends: dict[int, int] = {}
        segments = self.metadata.list_remote_log_segments(partition)
        async with contextlib.aclosing(segments):
            async for segment in segments:
                if segment.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                    end = segment.end_offset + 1
                    ends[end] = max(ends.get(end, 0), segment.segment_size_in_bytes)
        return sorted(ends.items())

    @contextlib.asynccontextmanager
    async def _broker_tail(self, partition: TopicIdPartition) -> AsyncIterator[_BrokerTail | None]:
        """The partition's tail on the broker, opened for the block; None without one."""
        if not self.bootstrap_servers:
            yield None
            return
        tail = _BrokerTail(self, partition)
        try:
            await tail.open()
            yield tail
        finally:
            await tail.close()

    async def _summary(self, partition: TopicIdPartition) -> RemotePartitionSummary | None:
        for summary in await self.metadata.list_remote_partitions(partition.topic):
            if summary.topic_id_partition == partition:
                return summary
        return None

    async def _resolve(
        self,
        partition: TopicIdPartition,
        start: Start,
        remote: RemotePartitionSummary | None,
        tail: _BrokerTail | None,
    ) -> int:
        if isinstance(start, bool) or not isinstance(start, int | str | AtTimestamp):
            raise InvalidArgumentError(
                "start", f"{start!r}: an offset, earliest, latest or AtTimestamp"
            )
        if isinstance(start, int):
            if start < 0:
                raise InvalidArgumentError("start", f"offset {start} is negative")
            return start
        if start == "earliest":
            if remote is not None:
                return remote.earliest_offset
            return (await tail.watermarks())[0] if tail is not None else 0
        if start == "latest":
            return await self._end(remote, tail)
        if isinstance(start, AtTimestamp):
            found = await self._offset_for_time(partition, start.timestamp_ms, remote, tail)
            return found if found is not None else await self._end(remote, tail)
        raise InvalidArgumentError(
            "start", f"{start!r}: an offset, earliest, latest or AtTimestamp"
        )

    async def offset_for_time(self, partition: TopicIdPartition, timestamp_ms: int) -> int | None:
        """The first offset whose record's timestamp is at or after `timestamp_ms`, in the
        remote tier or (with a broker) the tail; None when no record is that late."""
        remote = await self._summary(partition)
        async with self._broker_tail(partition) as tail:
            return await self._offset_for_time(partition, timestamp_ms, remote, tail)

    async def _offset_for_time(
        self,
        partition: TopicIdPartition,
        timestamp_ms: int,
        remote: RemotePartitionSummary | None,
        tail: _BrokerTail | None,
    ) -> int | None:
        found = await self.fetch.list_offsets(partition, timestamp_ms) if remote else None
        if found is not None:
            return found.offset
        return await tail.offset_for_time(timestamp_ms) if tail is not None else None

    async def _end(self, remote: RemotePartitionSummary | None, tail: _BrokerTail | None) -> int:
        if tail is not None:
            return (await tail.watermarks())[1]
        return remote.latest_tiered_offset + 1 if remote is not None else 0

    async def _remote(
        self, partition: TopicIdPartition, start: int, end: int
    ) -> AsyncGenerator[FetchedRecords, None]:
        topic, number = partition.topic, partition.partition
        if not self.read_committed:
            # Whole segments from their files where the store lends them, the rest (or
            # all) by URL or the fetch service's bulk read.
            position, files = start, self._segment_files
            for segment in await self._whole_segments(partition, start, end):
                opened = await files.open(segment) if files is not None else None
                if opened is None:
                    break
                views = batch_chunks(*opened, end, self.chunk_bytes or FILE_CHUNK_BYTES)
                async with contextlib.aclosing(views):
                    async for data in views:
                        yield fetched_records(
                            data, topic, number, start_offset=start, end_offset=end
                        )
                position = segment.end_offset + 1
            if position < end:
                bulk = self._bulk(partition, position, end)
                async with contextlib.aclosing(bulk):
                    async for batches in bulk:
                        yield fetched_records(
                            batches, topic, number, start_offset=start, end_offset=end
                        )
            return
        position = start
        while position < end:
            (fetched,) = await self.fetch.fetch(
                [FetchPartition(partition, position, FETCH_BYTES)], read_committed=True
            )
            if fetched.error is not None:
                raise fetched.error
            headers = list(iter_batches(fetched.records))
            if not headers:
                return  # nothing more in the remote tier
            yield fetched_records(
                fetched.records,
                topic,
                number,
                start_offset=position,
                end_offset=end,
                aborted=AbortedTransactions(fetched.aborted_transactions),
            )
            position = headers[-1].last_offset + 1

    async def _bulk(
        self, partition: TopicIdPartition, position: int, end: int
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """Whole batches of [position, end): by URL where the fetch service locates them,
        the rest (or all) through its bulk read."""
        urls = self._urls
        if urls is not None and time.monotonic() >= self._urls_paused_until:
            reads = urls.read(
                partition, position, end, chunk_bytes=self.chunk_bytes or FILE_CHUNK_BYTES
            )
            try:
                async with contextlib.aclosing(reads):
                    async for batches in reads:
                        position = batches.last_offset + 1
                        yield batches.data
                return  # every located segment read to the range's end
            except RemoteResourceNotFoundError:
                # Deleted since it was located (retention): the service looks again.
                log.debug("%s: a segment from offset %d is gone; asking again", partition, position)
            except UrlReadUnavailable as exc:
                self._urls_paused_until = time.monotonic() + URL_PAUSE_S
                log.warning(
                    "%s: reading from offset %d through the fetch service: %s",
                    partition,
                    position,
                    exc,
                )
            except RemoteLogError as exc:
                if exc.code != "UNIMPLEMENTED":  # no URLs here, or an older service
                    raise
                self._urls = None
                await urls.close()
        chunks = self.fetch.read_offset_range(
            partition, position, end, chunk_bytes=self.chunk_bytes
        )
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield chunk.records

    async def _whole_segments(
        self, partition: TopicIdPartition, start: int, end: int
    ) -> list[RemoteLogSegmentMetadata]:
        """The segments to read from their files, from `start` on (segment_files); none
        without the store's short circuit."""
        if self._segment_files is None or not self._segment_files.enabled:
            return []
        # Listed ascending by start offset: the stream is left at the first segment past the
        # range, and only segments that reach the range are kept (a task reads one segment
        # of what may be thousands).
        listed = []
        segments = self.metadata.list_remote_log_segments(partition)
        async with contextlib.aclosing(segments):
            async for segment in segments:
                if segment.start_offset >= end:
                    break
                if segment.end_offset >= start:
                    listed.append(segment)
        return whole_segments(listed, start, end)


def _decoded(chunk: Chunk) -> list[ConsumerRecord]:
    return chunk.records() if isinstance(chunk, FetchedRecords) else chunk


class _BrokerTail:
    """The partition's untiered tail, read from the broker by a group-less consumer whose
    blocking calls run in a worker thread."""

    def __init__(self, owner: TieredConsumer, partition: TopicIdPartition) -> None:
        self.owner = owner
        self.partition = partition
        self._consumer: Any = None

    async def open(self) -> None:
        self._consumer = await asyncio.to_thread(kafka_consumer, self.owner._kafka_config())

    def _topic_partition(self, offset: int = -1001) -> Any:
        from confluent_kafka import TopicPartition

        return TopicPartition(self.partition.topic, self.partition.partition, offset)

    async def watermarks(self) -> tuple[int, int]:
        low, high = await asyncio.to_thread(
            self._consumer.get_watermark_offsets, self._topic_partition(), 10
        )
        return int(low), int(high)

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        (found,) = await asyncio.to_thread(
            self._consumer.offsets_for_times, [self._topic_partition(timestamp_ms)], 10
        )
        return int(found.offset) if found.offset >= 0 else None  # < 0: no record that late

    async def read(self, start: int, end: int | None) -> AsyncGenerator[list[ConsumerRecord], None]:
        """From `start` to `end` (exclusive), or to the end of the log (EOF) when None; a
        list per poll."""
        await asyncio.to_thread(self._consumer.assign, [self._topic_partition(start)])
        done = False
        while not done:
            messages = await asyncio.to_thread(self._consumer.consume, BROKER_BATCH, 1.0)
            records, done = _from_messages(messages, end)
            if records:
                yield records

    async def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await asyncio.to_thread(consumer.close)


def kafka_consumer(config: Mapping[str, Any]) -> Any:
    """A confluent-kafka Consumer; a setting librdkafka refuses is an InvalidArgumentError
    naming it as the caller passed it (`kafka.<name>`)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException

    try:
        return Consumer(dict(config))
    except KafkaException as exc:
        error = exc.args[0]
        if not isinstance(error, KafkaError) or error.code() != KafkaError._INVALID_ARG:
            raise
        named = re.search(r'property "([^"]+)"', error.str())
        field = f"kafka.{named[1]}" if named else "kafka"
        raise InvalidArgumentError(field, error.str()) from None


def _high_watermarks(
    config: dict[str, Any], partitions: Sequence[TopicIdPartition]
) -> dict[TopicIdPartition, int]:
    """The broker's high watermark (under read_committed its last stable offset) of each
    partition; blocking."""
    from confluent_kafka import TopicPartition

    consumer = kafka_consumer(config)
    try:
        return {
            tip: int(
                consumer.get_watermark_offsets(TopicPartition(tip.topic, tip.partition), 10)[1]
            )
            for tip in partitions
        }
    finally:
        consumer.close()


def _broker_partitions(config: dict[str, Any], topic: str | None) -> list[tuple[str, int, int]]:
    """(topic, partition, log start offset) of the broker's partitions of `topic`, or
    of every topic but the internal ones; blocking."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    consumer = kafka_consumer(config)
    try:
        cluster = consumer.list_topics(topic, timeout=10)
        found = []
        for name, described in cluster.topics.items():
            if described.error is not None:
                if described.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise KafkaException(described.error)
            if topic is None and name.startswith("__"):
                continue
            for number in described.partitions:
                low, _ = consumer.get_watermark_offsets(TopicPartition(name, number), 10)
                found.append((name, number, int(low)))
        return sorted(found)
    finally:
        consumer.close()


def _from_messages(messages: list[Any], end: int | None) -> tuple[list[ConsumerRecord], bool]:
    """The records of one poll before `end`, and whether the read is done (EOF or end)."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException

    records: list[ConsumerRecord] = []
    for message in messages:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return records, True
            raise KafkaException(error)
        offset = message.offset()
        if end is not None and offset >= end:
            return records, True
        kind, timestamp = message.timestamp()
        epoch = message.leader_epoch()
        records.append(
            ConsumerRecord(
                message.topic(),
                message.partition(),
                offset,
                timestamp,
                LOG_APPEND_TIME if kind == TIMESTAMP_LOG_APPEND_TIME else CREATE_TIME,
                message.key(),
                message.value(),
                tuple(message.headers() or ()),
                epoch if epoch is not None and epoch >= 0 else None,
            )
        )
        if end is not None and offset + 1 >= end:
            return records, True
    return records, False


class BlockingTieredConsumer:
    """The same for synchronous code (a Spark task, a script): its own event loop, run
    in the calling thread for each step of an iteration."""

    def __init__(self, fetch_address: str, metadata_address: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._consumer = self._loop.run_until_complete(
            _connect(fetch_address, metadata_address, kwargs)
        )

    def partitions(self, topic: str | None = None) -> list[RemotePartitionSummary]:
        return self._loop.run_until_complete(self._consumer.partitions(topic))

    def offset_for_time(self, partition: TopicIdPartition, timestamp_ms: int) -> int | None:
        return self._loop.run_until_complete(
            self._consumer.offset_for_time(partition, timestamp_ms)
        )

    def segment_ends(self, partition: TopicIdPartition) -> list[tuple[int, int]]:
        return self._loop.run_until_complete(self._consumer.segment_ends(partition))

    def end_offset(self, partition: TopicIdPartition) -> int:
        return self._loop.run_until_complete(self._consumer.end_offset(partition))

    def end_offsets(self, partitions: Sequence[TopicIdPartition]) -> dict[TopicIdPartition, int]:
        return self._loop.run_until_complete(self._consumer.end_offsets(partitions))

    def read(
        self, partition: TopicIdPartition, start: Start = "earliest", end_offset: int | None = None
    ) -> Iterator[ConsumerRecord]:
        for chunk in self.read_chunks(partition, start, end_offset):
            yield from chunk

    def read_chunks(
        self, partition: TopicIdPartition, start: Start = "earliest", end_offset: int | None = None
    ) -> Iterator[list[ConsumerRecord]]:
        for chunk in self.read_undecoded(partition, start, end_offset):
            yield _decoded(chunk)

    def read_undecoded(
        self, partition: TopicIdPartition, start: Start = "earliest", end_offset: int | None = None
    ) -> Iterator[Chunk]:
        # A step of the loop per chunk, not per record: a step costs far more than a record.
        chunks = self._consumer.read_undecoded(partition, start, end_offset)
        try:
            while True:
                try:
                    yield self._loop.run_until_complete(chunks.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run_until_complete(chunks.aclose())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self._consumer.close())
            # A stream abandoned midway (a Spark task under limit()) leaves gRPC a task
            # awaiting its cancelled call's status: closed under it, the loop would drop
            # it pending, which asyncio logs as an error when it is collected.
            self._loop.run_until_complete(_finish_pending_tasks())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    def __enter__(self) -> BlockingTieredConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _finish_pending_tasks(timeout_s: float = 5.0) -> None:
    """Waits for the loop's other tasks, and cancels those still running after
    `timeout_s`. Not cancelled at once: a cancelled gRPC status task leaves its call
    to complete later into the closed loop ('Event loop is closed')."""
    pending = asyncio.all_tasks() - {asyncio.current_task()}
    if pending:
        _, late = await asyncio.wait(pending, timeout=timeout_s)
        await cancel_and_wait(late)


async def _connect(fetch: str, metadata: str, kwargs: dict[str, Any]) -> TieredConsumer:
    # Inside the loop: the clients' channels belong to the loop they are made in.
    return TieredConsumer.connect(fetch, metadata, **kwargs)
