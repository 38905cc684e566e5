"""What the batch and the streaming `remotelog` readers share: a task's offset range,
how the driver cuts a partition into ranges, and how a task reads one.

A partition's remote range is cut at segment ends into tasks of up to
`remotelog.maxBytesPerPartition` of segments; with a broker the tail beyond the
remote tier is one more. Each task opens its own channels (a
BlockingTieredConsumer) and yields Arrow record batches.
"""

from __future__ import annotations

import functools
import gc
import itertools
import logging
import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from remotelog.client.base import ClientOptions
from remotelog.client.tiered_consumer import BlockingTieredConsumer, Chunk
from remotelog.core.errors import InvalidArgumentError, OffsetOutOfRangeError
from remotelog.core.model import RemotePartitionSummary, TopicIdPartition
from remotelog.kafka.columns import BinaryColumn, RecordColumns
from remotelog.kafka.consumer_records import ConsumerRecord, FetchedRecords
from remotelog.spark.options import ReadOptions
from remotelog.spark.planning import PlannedRange, segment_cuts
from remotelog.spark.prefetch import prefetched

log = logging.getLogger(__name__)

# Bytes a task fetches per chunk, and so per Arrow batch (about 34,000 rows of
# 100-byte values): with pyspark 4.2 a batch that stays in the cache between its
# decode and its write to the JVM beats a larger one (8 MiB: 0.68x of the ceiling,
# 2 MiB: 0.76-0.77x), and smaller ones pay gRPC per message (512 KiB: 0.72x).
CHUNK_BYTES = 2 * 1024 * 1024
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


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
    """One task's rows, as Arrow batches of the declared schema: a batch per chunk
    fetched from the remote tier, decoded straight into columns, or per broker poll."""
    if not isinstance(partition, OffsetRange):
        return  # a plan with no ranges: Spark still reads one placeholder partition
    freeze_worker_heap()
    with consumer_for(options) as consumer:
        yield from prefetched(_batches(consumer, partition, options))


@functools.cache
def freeze_worker_heap() -> None:
    """Exempt the Python worker's heap from later full collections, once per worker.

    Spark reuses a Python worker from task to task; its heap (pyspark, pyarrow,
    gRPC, the clients) is a few hundred thousand objects that every full
    collection walked, and the wrappers made per Arrow batch trigger them: 2-3% of
    a scan's CPU, all of it walking objects that live as long as the worker. The
    cost: a cycle among them that dies later is not reclaimed. Once, by a cache
    rather than gc.get_freeze_count(): that walks every frozen object, 5 ms a task.
    """
    gc.collect()
    gc.freeze()


def _batches(
    consumer: BlockingTieredConsumer, partition: OffsetRange, options: ReadOptions
) -> Iterator[pa.RecordBatch]:
    for chunk in _chunks(consumer, partition, options):
        if isinstance(chunk, FetchedRecords):
            columns = chunk.columns(options.include_headers)
            if columns.rows:
                yield columns_to_arrow(columns, chunk.topic, chunk.partition)
        elif chunk:
            yield to_arrow(chunk, options.include_headers)


def consumer_for(options: ReadOptions) -> BlockingTieredConsumer:
    return BlockingTieredConsumer(
        options.fetch_address,
        options.metadata_address,
        options=ClientOptions(
            tls_root_certs_file=options.tls_root_certs_file,
            tls_cert_file=options.tls_cert_file,
            tls_key_file=options.tls_key_file,
            bearer_token=options.bearer_token,
        ),
        bootstrap_servers=options.bootstrap_servers,
        isolation_level="read_committed" if options.read_committed else "read_uncommitted",
        # As Spark's Kafka source: kafka.group.id, else groupIdPrefix and a fresh suffix.
        kafka_config=dict(options.kafka_config),
        group_id_prefix=options.group_id_prefix,
        chunk_bytes=CHUNK_BYTES,
        short_circuit_socket=options.short_circuit_socket or None,
        fetch_urls=options.fetch_urls,
        hedge_percentile=options.hedge_percentile,
    )


def subscribed(
    consumer: BlockingTieredConsumer, options: ReadOptions, *, all_assigned: bool = True
) -> list[RemotePartitionSummary]:
    """The partitions the options name that the remote tier has data of, or (with a
    broker) the broker has; with `all_assigned`, an assigned partition neither has
    fails the query."""
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
            where = (
                "the remote tier or the broker" if options.bootstrap_servers else "the remote tier"
            )
            raise InvalidArgumentError("assign", f"{where} has no partition {named}")
    return found


def ranges(
    consumer: BlockingTieredConsumer,
    summary: RemotePartitionSummary,
    start: int,
    end: int | None,
    options: ReadOptions,
) -> list[PlannedRange]:
    """[start, end) of a partition as ranges to read: its remote segments packed into
    ranges of up to `max_bytes_per_partition` (segment_cuts) and, with a broker, the
    tail beyond the remote tier (end None: to the end the read finds)."""
    tip = summary.topic_id_partition
    tiered_end = summary.latest_tiered_offset + 1
    remote_end = tiered_end if end is None else min(end, tiered_end)
    key = (str(tip.topic_id), tip.topic, tip.partition)
    planned = []
    if start < remote_end:
        segments = consumer.segment_ends(tip)
        cuts = segment_cuts(segments, start, remote_end, options.max_bytes_per_partition)
        edges = [start, *cuts, remote_end]
        planned = [PlannedRange(*key, a, b) for a, b in itertools.pairwise(edges)]
    if options.bootstrap_servers and (end is None or end > tiered_end):
        planned.append(PlannedRange(*key, max(start, tiered_end), end))
    return planned


def _chunks(
    consumer: BlockingTieredConsumer, part: OffsetRange, options: ReadOptions
) -> Iterator[Chunk]:
    tip = part.topic_id_partition
    try:
        yield from consumer.read_undecoded(tip, part.start, part.end)
    except OffsetOutOfRangeError as exc:
        # Retention deleted the start of the range between planning and reading.
        where = f"{tip.topic}-{tip.partition} offsets from {part.start}"
        if options.fail_on_data_loss:
            raise RuntimeError(
                f"{where} were deleted from the remote tier after the query was planned "
                f"({exc.message}); set failOnDataLoss=false to skip them"
            ) from None
        log.warning("%s were deleted from the remote tier; skipped", where)
        yield from consumer.read_undecoded(tip, "earliest", part.end)


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


def _binary(column: BinaryColumn, count: int, kind: pa.DataType | None = None) -> pa.Array:
    validity = None if column.validity is None else pa.py_buffer(column.validity)
    buffers = [validity, pa.py_buffer(column.offsets), pa.py_buffer(column.data)]
    return pa.Array.from_buffers(kind or pa.binary(), count, buffers)


def _fixed(kind: pa.DataType, count: int, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(data)])


def columns_to_arrow(columns: RecordColumns, topic: str, partition: int) -> pa.RecordBatch:
    """The Arrow batch of decoded columns: their buffers wrapped, not copied."""
    n = columns.rows
    arrays = [
        _binary(columns.key, n),
        _binary(columns.value, n),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _fixed(pa.int64(), n, columns.offset),
        _fixed(pa.timestamp("us", tz="UTC"), n, columns.timestamp),
        _fixed(pa.int32(), n, columns.timestamp_type),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if columns.headers is not None:
        headers = columns.headers
        count = len(headers.keys.offsets) // 4 - 1  # int32 offsets, one more than keys
        pairs = pa.StructArray.from_arrays(
            [_binary(headers.keys, count, pa.string()), _binary(headers.values, count)],
            fields=list(HEADER_TYPE.value_type),
        )
        validity = None if headers.validity is None else pa.py_buffer(headers.validity)
        arrays.append(
            pa.Array.from_buffers(
                HEADER_TYPE, n, [validity, pa.py_buffer(headers.offsets)], children=[pairs]
            )
        )
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)
