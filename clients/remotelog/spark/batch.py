"""The batch reader of `format("remotelog")`: the driver plans from metadata only
(reading.py cuts the ranges and reads them): each partition's range between the
starting and ending options, narrowed by pushed filters (pushdown.py), then cut
further for `maxRecordsPerPartition` and `minPartitions`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from remotelog.client.tiered_consumer import BlockingTieredConsumer
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from remotelog.core.model import RemotePartitionSummary, TopicIdPartition
from remotelog.spark.options import ReadOptions
from remotelog.spark.planning import PlannedRange, split
from remotelog.spark.pushdown import Pushed, push
from remotelog.spark.reading import OffsetRange, consumer_for, ranges, read_batches, subscribed

log = logging.getLogger(__name__)


class RemotelogReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pushed = Pushed()

    def partitions(self) -> Sequence[OffsetRange]:
        options, pushed = self.options, self.pushed
        with consumer_for(options) as consumer:
            found = [
                summary
                for summary in subscribed(consumer, options)
                if pushed.keeps(summary.topic_id_partition)
            ]
            # As Spark's Kafka source: a batch ends where the broker's log ends when it is
            # planned, so a partition with nothing past the remote tier gets no tail task.
            ends = (
                consumer.end_offsets([s.topic_id_partition for s in found])
                if options.bootstrap_servers
                else {}
            )
            planned = [
                r for summary in found for r in _plan(consumer, summary, options, pushed, ends)
            ]
        cut = split(planned, options.min_partitions, options.max_records_per_partition)
        return [OffsetRange(r) for r in cut]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_batches(self.options, partition)


class FilteringReader(RemotelogReader):
    """The reader with filter pushdown (`remotelog.pushFilters=true`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, remaining = push(filters)
        return remaining


def _plan(
    consumer: BlockingTieredConsumer,
    summary: RemotePartitionSummary,
    options: ReadOptions,
    pushed: Pushed,
    ends: Mapping[TopicIdPartition, int],
) -> list[PlannedRange]:
    """The partition's range in the remote tier, in pieces of whole segments (up to
    remotelog.maxBytesPerPartition each), and with a broker its tail beyond, up to
    `ends` (the broker's log end) where no ending option says otherwise."""
    tip = summary.topic_id_partition
    bounds = _bounds(consumer, summary, options)
    if bounds is None:
        return []
    if bounds[1] is None and tip in ends:
        bounds = (bounds[0], ends[tip])
    start, end = pushed.offsets.clip(*bounds)
    if pushed.timestamp_from_ms is not None:
        found = consumer.offset_for_time(tip, pushed.timestamp_from_ms)
        if found is None:
            return []  # no record that late
        start = max(start, found)
    return ranges(consumer, summary, start, end, options)


def _bounds(
    consumer: BlockingTieredConsumer, summary: RemotePartitionSummary, options: ReadOptions
) -> tuple[int, int | None] | None:
    """[start, end) from the starting and ending options (end None: to the end the read
    finds), or None when a starting timestamp leaves nothing to read."""
    tip = summary.topic_id_partition
    start = _at_time(consumer, tip, options.starting.timestamp_of(tip.topic, tip.partition))
    if start is None:
        start = options.starting.of(tip.topic, tip.partition)
    elif start == LATEST_TIMESTAMP:  # no record that late
        if options.timestamp_strategy == "error":
            raise InvalidArgumentError(
                "startingTimestamp",
                f"{tip.topic}-{tip.partition} has no record at or after "
                f"{options.starting.timestamp_of(tip.topic, tip.partition)}; "
                "startingOffsetsByTimestampStrategy=latest starts at the end instead",
            )
        return None
    if start == EARLIEST_TIMESTAMP:
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
    return start, None if end == LATEST_TIMESTAMP else end


def _at_time(
    consumer: BlockingTieredConsumer, tip: TopicIdPartition, timestamp_ms: int | None
) -> int | None:
    """The offset a timestamp bound resolves to (LATEST_TIMESTAMP when no record is that late),
    or None without a timestamp bound."""
    if timestamp_ms is None:
        return None
    found = consumer.offset_for_time(tip, timestamp_ms)
    return LATEST_TIMESTAMP if found is None else found
