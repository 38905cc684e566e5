"""`spark.read.format("remotelog")`: a Kafka topic's records with the schema of Spark's
Kafka source, history read from the remote tier, the tail (optionally) from the broker.

The driver plans from metadata only: per Kafka partition one input partition for
each remote segment in its range and, with a broker, one for the tail beyond it;
cut further for `maxRecordsPerPartition` and `minPartitions`. Pushed filters
(pushdown.py) prune partitions and narrow ranges first. Each task opens its own channels (a
BlockingTieredConsumer) and yields Arrow record batches.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition

from remotelog.client.base import ClientOptions
from remotelog.client.tiered_consumer import BlockingTieredConsumer
from remotelog.core.errors import InvalidArgumentError, OffsetOutOfRangeError
from remotelog.core.model import RemotePartitionSummary, TopicIdPartition
from remotelog.kafka.consumer_records import ConsumerRecord
from remotelog.spark.options import EARLIEST, LATEST, ReadOptions, parse_options
from remotelog.spark.planning import PlannedRange, split
from remotelog.spark.pushdown import Pushed, push

log = logging.getLogger(__name__)

# Spark's Kafka source schema, column for column.
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_SCHEMA = ", headers array<struct<key: string, value: binary>>"
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ROWS_PER_BATCH = 8192


class RemotelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "remotelog"

    def schema(self) -> str:
        options = parse_options(self.options)
        return KAFKA_SCHEMA + (HEADERS_SCHEMA if options.include_headers else "")

    def reader(self, schema: Any) -> RemotelogReader:
        options = parse_options(self.options)
        return FilteringReader(options) if options.push_filters else RemotelogReader(options)


class OffsetRange(InputPartition):
    """Offsets [start, end) of one Kafka partition to read; end None = to the end the
    read finds (the broker's)."""

    def __init__(self, planned: PlannedRange) -> None:
        super().__init__((planned.topic, planned.partition, planned.start))
        self.topic_id, self.topic, self.partition = (
            planned.topic_id,
            planned.topic,
            planned.partition,
        )
        self.start, self.end = planned.start, planned.end

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(uuid.UUID(self.topic_id), self.topic, self.partition)


class RemotelogReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pushed = Pushed()

    def partitions(self) -> Sequence[OffsetRange]:
        options, pushed = self.options, self.pushed
        with _consumer(options) as consumer:
            found = [
                summary
                for summary in _subscribed(consumer, options)
                if pushed.keeps(summary.topic_id_partition)
            ]
            planned = [r for summary in found for r in _plan(consumer, summary, options, pushed)]
        cut = split(planned, options.min_partitions, options.max_records_per_partition)
        return [OffsetRange(r) for r in cut]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return  # a plan with no ranges: Spark still reads one placeholder partition
        include_headers = self.options.include_headers
        rows: list[ConsumerRecord] = []
        with _consumer(self.options) as consumer:
            for record in _records(consumer, partition, self.options):
                rows.append(record)
                if len(rows) == ROWS_PER_BATCH:
                    yield to_arrow(rows, include_headers)
                    rows = []
        if rows:
            yield to_arrow(rows, include_headers)


class FilteringReader(RemotelogReader):
    """The reader with filter pushdown (`remotelog.pushFilters=true`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, remaining = push(filters)
        return remaining


def _consumer(options: ReadOptions) -> BlockingTieredConsumer:
    return BlockingTieredConsumer(
        options.fetch_address,
        options.metadata_address,
        options=ClientOptions(
            tls_root_certs_file=options.tls_root_certs_file,
            tls_cert_file=options.tls_cert_file,
            tls_key_file=options.tls_key_file,
        ),
        bootstrap_servers=options.bootstrap_servers,
        isolation_level="read_committed" if options.read_committed else "read_uncommitted",
    )


def _subscribed(
    consumer: BlockingTieredConsumer, options: ReadOptions
) -> list[RemotePartitionSummary]:
    subscription = options.subscription
    names = subscription.topic_names()
    listed = (
        consumer.partitions(None)
        if names is None
        else [p for topic in names for p in consumer.partitions(topic)]
    )
    found = [
        p
        for p in listed
        if subscription.matches(p.topic_id_partition.topic, p.topic_id_partition.partition)
    ]
    if subscription.kind == "assign":
        missing = set(subscription.partitions) - {
            (p.topic_id_partition.topic, p.topic_id_partition.partition) for p in found
        }
        if missing:
            named = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
            raise InvalidArgumentError("assign", f"no data in the remote tier for {named}")
    return found


def _plan(
    consumer: BlockingTieredConsumer,
    summary: RemotePartitionSummary,
    options: ReadOptions,
    pushed: Pushed,
) -> list[PlannedRange]:
    """The partition's range in the remote tier, one piece per segment, and with a
    broker its tail beyond."""
    tip = summary.topic_id_partition
    bounds = _bounds(consumer, summary, options)
    if bounds is None:
        return []
    start, end = pushed.offsets.clip(*bounds)
    if pushed.timestamp_from_ms is not None:
        found = consumer.offset_for_time(tip, pushed.timestamp_from_ms)
        if found is None:
            return []  # no record that late
        start = max(start, found)
    tiered_end = summary.latest_tiered_offset + 1
    remote_end = tiered_end if end is None else min(end, tiered_end)
    key = (str(tip.topic_id), tip.topic, tip.partition)
    planned = []
    if start < remote_end:
        cuts = [e for e in consumer.segment_ends(tip) if start < e < remote_end]
        edges = [start, *cuts, remote_end]
        planned = [PlannedRange(*key, a, b) for a, b in itertools.pairwise(edges)]
    if options.bootstrap_servers and (end is None or end > tiered_end):
        planned.append(PlannedRange(*key, max(start, tiered_end), end))
    return planned


def _bounds(
    consumer: BlockingTieredConsumer, summary: RemotePartitionSummary, options: ReadOptions
) -> tuple[int, int | None] | None:
    """[start, end) from the starting and ending options (end None: to the end the read
    finds), or None when a starting timestamp leaves nothing to read."""
    tip = summary.topic_id_partition
    start = _at_time(consumer, tip, options.starting.timestamp_of(tip.topic, tip.partition))
    if start is None:
        start = options.starting.of(tip.topic, tip.partition)
    elif start == LATEST:  # no record that late
        if options.timestamp_strategy == "error":
            raise InvalidArgumentError(
                "startingTimestamp",
                f"{tip.topic}-{tip.partition} has no record at or after "
                f"{options.starting.timestamp_of(tip.topic, tip.partition)}; "
                "startingOffsetsByTimestampStrategy=latest starts at the end instead",
            )
        return None
    if start == EARLIEST:
        start = summary.earliest_offset
    elif start < summary.earliest_offset:
        lost = f"{tip.topic}-{tip.partition}: offsets {start}-{summary.earliest_offset - 1}"
        if options.fail_on_data_loss:
            raise InvalidArgumentError(
                "startingOffsets",
                f"{lost} are no longer in the remote tier (retention); "
                "set failOnDataLoss=false to start at the earliest offset",
            )
        log.warning("%s are no longer in the remote tier: starting at the earliest", lost)
        start = summary.earliest_offset
    end: int | None = _at_time(consumer, tip, options.ending.timestamp_of(tip.topic, tip.partition))
    if end is None:
        end = options.ending.of(tip.topic, tip.partition)
    return start, None if end == LATEST else end


def _at_time(
    consumer: BlockingTieredConsumer, tip: TopicIdPartition, timestamp_ms: int | None
) -> int | None:
    """The offset a timestamp bound resolves to (LATEST when no record is that late),
    or None without a timestamp bound."""
    if timestamp_ms is None:
        return None
    found = consumer.offset_for_time(tip, timestamp_ms)
    return LATEST if found is None else found


def _records(
    consumer: BlockingTieredConsumer, part: OffsetRange, options: ReadOptions
) -> Iterator[ConsumerRecord]:
    tip = part.topic_id_partition
    try:
        yield from consumer.read(tip, part.start, part.end)
    except OffsetOutOfRangeError as exc:
        # Retention deleted the start of the range between planning and reading.
        where = f"{tip.topic}-{tip.partition} offsets from {part.start}"
        if options.fail_on_data_loss:
            raise RuntimeError(
                f"{where} were deleted from the remote tier after the query was planned "
                f"({exc.message}); set failOnDataLoss=false to skip them"
            ) from None
        log.warning("%s were deleted from the remote tier; skipped", where)
        yield from consumer.read(tip, "earliest", part.end)


def to_arrow(records: Sequence[ConsumerRecord], include_headers: bool) -> pa.RecordBatch:
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.array([r.topic for r in records], pa.string()),
        pa.array([r.partition for r in records], pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.timestamp("us", tz="UTC")),
        pa.array([r.timestamp_type for r in records], pa.int32()),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        headers = [
            [{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in records
        ]
        columns.append(pa.array(headers, HEADER_TYPE))
        names.append("headers")
    return pa.RecordBatch.from_arrays(columns, names=names)
