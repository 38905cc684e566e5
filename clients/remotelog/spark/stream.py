"""`spark.readStream.format("remotelog")`: a micro-batch stream over a topic's records as
segments keep arriving in the remote tier (and, with a broker, its tail).

Offsets are Spark's Kafka source's JSON, `{"topic": {"0": next_offset}}`, kept in the
query's checkpoint; a micro-batch reads [start, end) of each partition, so a
restart replays exactly what was not committed. `maxOffsetsPerTrigger` caps a
micro-batch, shared between partitions in proportion to what each has waiting
(KafkaMicroBatchStream.rateLimit); `minOffsetsPerTrigger` holds a micro-batch back
until that many offsets wait or `maxTriggerDelay` has passed since the last one
(KafkaMicroBatchStream.delayBatch). `Trigger.AvailableNow` reads what exists when
the query starts, in as many capped micro-batches as that takes. Partitions that
appear later are read from their earliest offset.

Spark's Kafka source hands both bounds to Spark as one composite read limit; the
Python data source API takes only the built-in ones, so the reader asks Spark for
ReadMinRows or ReadMaxRows and applies the other bound from its own options. A
ReadAllAvailable from Spark (Trigger.Once) overrides both, as it does there.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from remotelog.client.tiered_consumer import BlockingTieredConsumer
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from remotelog.core.model import RemotePartitionSummary
from remotelog.spark.options import ReadOptions
from remotelog.spark.planning import split
from remotelog.spark.reading import OffsetRange, consumer_for, ranges, read_batches, subscribed

log = logging.getLogger(__name__)

# (topic, partition) -> offset
Positions = dict[tuple[str, int], int]


class RemotelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self, options: ReadOptions, clock_ms: Callable[[], float] = lambda: time.time() * 1000
    ) -> None:
        self.options = options
        # Set by Trigger.AvailableNow: no micro-batch goes past these.
        self.target: Positions | None = None
        self.clock_ms = clock_ms
        # When the last micro-batch was let through; 0, so that the first one is.
        self.last_trigger_ms = 0.0

    def initialOffset(self) -> dict[str, dict[str, int]]:
        starting = self.options.starting
        with consumer_for(self.options) as consumer:
            positions = {}
            for summary in self._partitions(consumer):
                tip = summary.topic_id_partition
                timestamp = starting.timestamp_of(tip.topic, tip.partition)
                if timestamp is not None:
                    found = consumer.offset_for_time(tip, timestamp)
                    at = consumer.end_offset(tip) if found is None else found
                else:
                    at = starting.of(tip.topic, tip.partition)
                    if at == EARLIEST_TIMESTAMP:
                        at = summary.earliest_offset
                    elif at == LATEST_TIMESTAMP:
                        at = consumer.end_offset(tip)
                positions[(tip.topic, tip.partition)] = at
        return _to_json(positions)

    def getDefaultReadLimit(self) -> ReadLimit:
        options = self.options
        if options.max_offsets_per_trigger is not None:
            return ReadMaxRows(options.max_offsets_per_trigger)
        if options.min_offsets_per_trigger is not None:
            return ReadMinRows(options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target, _ = self._available()

    def latestOffset(
        self, start: Mapping[str, Mapping[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        begin = _from_json(start)
        available, earliest = self._available()
        target = self.target
        ends = {
            key: end if target is None else min(end, target[key])
            for key, end in available.items()
            if target is None or key in target
        }
        # Never back; a partition missing from `start` appeared since: from its earliest.
        ends = {
            key: max(end, begin[key]) if key in begin else end
            for key, end in ends.items()
            if key in begin or end > earliest[key]
        }
        if isinstance(limit, ReadAllAvailable):
            return _to_json({**begin, **ends})
        if self.holds_back({**earliest, **begin}, ends):
            return _to_json(begin)
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit({**earliest, **begin}, ends, limit.max_rows)
        return _to_json({**begin, **ends})

    def holds_back(self, begin: Positions, ends: Positions) -> bool:
        """Whether to hold this micro-batch back: fewer than minOffsetsPerTrigger new
        offsets and maxTriggerDelay not yet passed since the last micro-batch. Never
        under Trigger.AvailableNow, where nothing more is coming to wait for."""
        wanted = self.options.min_offsets_per_trigger
        if wanted is None or self.target is not None:
            return False
        now = self.clock_ms()
        waiting = sum(end - begin[key] for key, end in ends.items())
        if now - self.last_trigger_ms < self.options.max_trigger_delay_ms and waiting < wanted:
            return True
        self.last_trigger_ms = now
        return False

    def partitions(
        self, start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]
    ) -> Sequence[OffsetRange]:
        begin, until = _from_json(start), _from_json(end)
        options = self.options
        planned = []
        with consumer_for(options) as consumer:
            summaries = {_key(s): s for s in self._partitions(consumer)}
            for key, stop in sorted(until.items()):
                summary = summaries.get(key)
                if summary is None:
                    self._lost(f"{key[0]}-{key[1]} is no longer in the remote tier")
                    continue
                first = begin.get(key, summary.earliest_offset)
                if first < summary.earliest_offset:
                    self._lost(
                        f"{key[0]}-{key[1]}: offsets {first}-{summary.earliest_offset - 1} were "
                        "deleted from the remote tier before the stream read them"
                    )
                    first = summary.earliest_offset
                if first < stop:
                    planned += ranges(consumer, summary, first, stop, options)
        cut = split(planned, options.min_partitions, options.max_records_per_partition)
        return [OffsetRange(r) for r in cut]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_batches(self.options, partition)

    # -- helpers --------------------------------------------------------------------

    def _partitions(self, consumer: BlockingTieredConsumer) -> list[RemotePartitionSummary]:
        # A stream may start before an assigned partition has anything tiered.
        return subscribed(consumer, self.options, all_assigned=False)

    def _available(self) -> tuple[Positions, Positions]:
        """Per partition, where a read started now would end, and its earliest offset."""
        with consumer_for(self.options) as consumer:
            found = self._partitions(consumer)
            earliest = {_key(s): s.earliest_offset for s in found}
            if not self.options.bootstrap_servers:
                return {_key(s): s.latest_tiered_offset + 1 for s in found}, earliest
            ends = consumer.end_offsets([s.topic_id_partition for s in found])
            return {(tip.topic, tip.partition): end for tip, end in ends.items()}, earliest

    def _lost(self, what: str) -> None:
        if self.options.fail_on_data_loss:
            raise InvalidArgumentError(
                "failOnDataLoss", f"{what}; set failOnDataLoss=false to skip what was lost"
            )
        log.warning("%s: skipped", what)


def rate_limit(begin: Positions, ends: Positions, limit: int) -> Positions:
    """Ends moved back so that all partitions together advance at most about `limit`
    offsets, each in proportion to what it has waiting, none starved (Spark's
    KafkaMicroBatchStream.rateLimit)."""
    sizes = {key: end - begin[key] for key, end in ends.items() if end > begin[key]}
    total = sum(sizes.values())
    if total < 1:
        return ends
    limited = dict(ends)
    for key, size in sizes.items():
        share = limit * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[key] = min(ends[key], begin[key] + step)
    return limited


def _key(summary: RemotePartitionSummary) -> tuple[str, int]:
    tip = summary.topic_id_partition
    return tip.topic, tip.partition


def _to_json(positions: Positions) -> dict[str, dict[str, int]]:
    offsets: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        offsets.setdefault(topic, {})[str(partition)] = offset
    return offsets


def _from_json(offsets: Mapping[str, Mapping[str, int]]) -> Positions:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    }
