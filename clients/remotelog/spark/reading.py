"""What the batch and the streaming `remotelog` readers share: a task's offset range,
how the driver cuts a partition into ranges, and how a task reads one.

A partition's remote range is cut at segment ends, one task per segment; with a
broker the tail beyond the remote tier is one more. Each task opens its own
channels (a BlockingTieredConsumer) and yields Arrow record batches.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from remotelog.client.base import ClientOptions
from remotelog.client.tiered_consumer import BlockingTieredConsumer
from remotelog.core.errors import InvalidArgumentError, OffsetOutOfRangeError
from remotelog.core.model import RemotePartitionSummary, TopicIdPartition
from remotelog.kafka.consumer_records import ConsumerRecord
from remotelog.spark.options import ReadOptions
from remotelog.spark.planning import PlannedRange

log = logging.getLogger(__name__)

# Spark's Kafka source schema, column for column.
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_SCHEMA = ", headers array<struct<key: string, value: binary>>"
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ROWS_PER_BATCH = 8192


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


def read_batches(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """One task's rows, as Arrow batches of the declared schema."""
    if not isinstance(partition, OffsetRange):
        return  # a plan with no ranges: Spark still reads one placeholder partition
    rows: list[ConsumerRecord] = []
    with consumer_for(options) as consumer:
        for record in _records(consumer, partition, options):
            rows.append(record)
            if len(rows) == ROWS_PER_BATCH:
                yield to_arrow(rows, options.include_headers)
                rows = []
    if rows:
        yield to_arrow(rows, options.include_headers)


def consumer_for(options: ReadOptions) -> BlockingTieredConsumer:
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


def subscribed(
    consumer: BlockingTieredConsumer, options: ReadOptions, *, all_assigned: bool = True
) -> list[RemotePartitionSummary]:
    """The partitions the options name that have data in the remote tier; with
    `all_assigned`, an assigned partition without any fails the query."""
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
    if all_assigned and subscription.kind == "assign":
        missing = set(subscription.partitions) - {
            (p.topic_id_partition.topic, p.topic_id_partition.partition) for p in found
        }
        if missing:
            named = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
            raise InvalidArgumentError("assign", f"no data in the remote tier for {named}")
    return found


def ranges(
    consumer: BlockingTieredConsumer,
    summary: RemotePartitionSummary,
    start: int,
    end: int | None,
    options: ReadOptions,
) -> list[PlannedRange]:
    """[start, end) of a partition as ranges to read: one per remote segment it covers
    and, with a broker, the tail beyond the remote tier (end None: to the end the read
    finds)."""
    tip = summary.topic_id_partition
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
