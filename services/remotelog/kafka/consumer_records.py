"""Record batches as a Kafka consumer hands them out: control batches dropped, and under
read_committed the records of aborted transactions too.

The filtering is the Java consumer's (CompletedFetch.nextFetchedRecord): a fetch
answers with the aborted transactions overlapping it, as (producer id, first
offset); a transactional batch whose producer has an aborted transaction that
began at or before the batch's last offset is skipped, until that producer's
ABORT marker ends the transaction.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from remotelog.kafka.columns import RecordColumns, decode_columns
from remotelog.kafka.records import (
    BatchHeader,
    decode_records,
    iter_batches,
    parse_control_record,
)

# Spark's and Kafka's timestampType: 0 CreateTime, 1 LogAppendTime.
CREATE_TIME = 0
LOG_APPEND_TIME = 1


class ConsumerRecord(NamedTuple):
    """One record as a Kafka consumer (and Spark's Kafka source) sees it. A named tuple:
    a reader makes one per record, and a frozen dataclass cost twenty times the decode."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int | None


class AbortedTransactions:
    """Which transactional batches of one fetch's records belong to aborted transactions."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        # (first offset, producer id): consumed in offset order as batches pass them.
        self._pending = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def skips(self, data: bytes | memoryview, header: BatchHeader) -> bool:
        """Whether `header`'s batch is left out (call for every batch, in offset order)."""
        if header.producer_id < 0:
            return False
        while self._pending and self._pending[0][0] <= header.last_offset:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if header.is_control:
            (marker,) = decode_records(data, header)
            if not parse_control_record(marker).is_commit:
                self._aborting.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborting


def consumer_batches(
    data: bytes | memoryview,
    *,
    start_offset: int = 0,
    end_offset: int | None = None,
    aborted: AbortedTransactions | None = None,
    source: str = "<fetch>",
) -> list[BatchHeader]:
    """The batches of `data` a consumer reads records from for [start_offset,
    end_offset): no control batches; with `aborted` (read_committed), none of aborted
    transactions."""
    kept = []
    for header in iter_batches(data, source=source):
        if aborted is not None and aborted.skips(data, header):
            continue
        if header.is_control or header.last_offset < start_offset:
            continue
        if end_offset is not None and header.base_offset >= end_offset:
            break
        kept.append(header)
    return kept


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    """The records in [start_offset, end_offset) of a fetch's `batches` (chosen by
    consumer_batches), not decoded yet: as ConsumerRecords or as Arrow columns."""

    data: bytes | memoryview
    batches: list[BatchHeader]
    topic: str
    partition: int
    start_offset: int
    end_offset: int | None
    source: str = "<fetch>"

    def records(self) -> list[ConsumerRecord]:
        found: list[ConsumerRecord] = []
        start, end = self.start_offset, self.end_offset
        for header in self.batches:
            append_time = header.is_log_append_time
            epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else None
            for record in decode_records(self.data, header, source=self.source):
                if record.offset < start:
                    continue
                if end is not None and record.offset >= end:
                    return found
                found.append(
                    ConsumerRecord(
                        self.topic,
                        self.partition,
                        record.offset,
                        header.max_timestamp if append_time else record.timestamp,
                        LOG_APPEND_TIME if append_time else CREATE_TIME,
                        record.key,
                        record.value,
                        record.headers,
                        epoch,
                    )
                )
        return found

    def columns(self, include_headers: bool) -> RecordColumns:
        return decode_columns(
            self.data,
            self.batches,
            self.start_offset,
            self.end_offset,
            include_headers,
            self.source,
        )


def fetched_records(
    data: bytes | memoryview,
    topic: str,
    partition: int,
    *,
    start_offset: int = 0,
    end_offset: int | None = None,
    aborted: AbortedTransactions | None = None,
    source: str = "<fetch>",
) -> FetchedRecords:
    """`data`'s records in [start_offset, end_offset) as a consumer sees them."""
    batches = consumer_batches(
        data, start_offset=start_offset, end_offset=end_offset, aborted=aborted, source=source
    )
    return FetchedRecords(data, batches, topic, partition, start_offset, end_offset, source)
