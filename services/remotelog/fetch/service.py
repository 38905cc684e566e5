"""The remote fetch service's work: Fetch through pool and purgatory, bulk reads, ListOffsets.

Fetch reads every partition at once (Kafka read only the first remote
partition of a fetch until 2025), each in a reader worker, and waits in the
purgatory for all of them or `max_wait_ms`. The answer then applies the
request's total byte limit in request order, cutting at batch boundaries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remotelog.core import metrics as m
from remotelog.core.errors import InvalidArgumentError, RemoteLogError, should_retry_call
from remotelog.core.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP
from remotelog.core.model import (
    INT64_MAX,
    RemoteLogSegmentMetadata,
    SegmentByteRange,
    TopicIdPartition,
)
from remotelog.core.ports import SegmentLookup, SegmentReader
from remotelog.core.purgatory import DelayedOperationPurgatory
from remotelog.core.quota import ByteRateQuota
from remotelog.fetch.batch_file import BatchMessage, read_batch_message
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.fetch.delayed_fetch import DelayedRemoteFetch, Outcome
from remotelog.fetch.index_cache import RemoteIndexCache, SecondLevel
from remotelog.fetch.locate import SegmentLocator
from remotelog.fetch.metrics import SCOPE
from remotelog.fetch.offsets import OffsetAndEpoch, offset_for_timestamp
from remotelog.fetch.reader import Deadline, PartitionData, PartitionRead, RemoteLogReader
from remotelog.fetch.reader_pool import ReaderPool
from remotelog.fetch.remote_tier import RemoteTierView, RemoteTierViews
from remotelog.kafka.batches import BatchCutter, BatchPieces, Piece

log = logging.getLogger(__name__)


# A bulk read's chunk: views still to be encoded, or a message read straight from a file.
BulkChunk = BatchPieces | BatchMessage


@dataclass(slots=True)
class _Range:
    """A bulk read in progress: where it continues and where its chunks go."""

    next_offset: int
    end_offset: int | None
    chunk_bytes: int
    queue: asyncio.Queue[BulkChunk | BaseException | None]

    async def put(self, taken: BulkChunk | None) -> bool:
        if taken is None:
            return False
        await self.queue.put(taken)
        self.next_offset = taken.last_offset + 1
        return True


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One partition's answer: data (possibly empty) or an error."""

    partition: TopicIdPartition
    data: PartitionData
    error: RemoteLogError | None = None


def _trim(records: Piece, budget: int, at_least_one: bool) -> Piece:
    """Whole batches of `records` within `budget` bytes (the first one regardless, if allowed)."""
    if len(records) <= budget:
        return records
    cutter = BatchCutter(0, "fetched records")
    cutter.feed(records)
    taken = cutter.take(budget, at_least_one=at_least_one)
    return taken.data if taken is not None else b""


class RemoteFetch:
    def __init__(
        self,
        config: RemoteFetchConfig,
        store: SegmentReader,
        metadata: SegmentLookup,
        *,
        second_level: SecondLevel | None = None,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.metrics = m.Instruments(SCOPE, m.FETCH)
        self.index_cache = RemoteIndexCache(
            Path(config.index_cache_dir).expanduser(),
            config.index_cache_total_size_bytes,
            store,
            second_level=second_level,
        )
        self.views = RemoteTierViews(self._list_segments, config.segment_metadata_cache_ms)
        self.reader = RemoteLogReader(
            store, metadata, self.index_cache, self.views, config.backoff()
        )
        self.locator = SegmentLocator(
            self.reader,
            store,
            enabled=config.segment_store_fetch_urls,
            data_keys_over_tls=bool(config.tls_cert_file),
        )
        self.pool = ReaderPool(config.reader_threads, config.reader_max_pending_tasks)
        self.quota = (
            ByteRateQuota(
                config.fetch_max_bytes_per_second,
                config.fetch_quota_window_num,
                config.fetch_quota_window_size_seconds,
            )
            if config.fetch_max_bytes_per_second < INT64_MAX
            else None
        )
        self.purgatory: DelayedOperationPurgatory | None = None

    async def _list_segments(
        self, partition: TopicIdPartition, timeout_s: float | None
    ) -> list[RemoteLogSegmentMetadata]:
        return [
            s async for s in self.metadata.list_remote_log_segments(partition, timeout_s=timeout_s)
        ]

    async def start(self) -> None:
        await asyncio.to_thread(self.index_cache.load)
        self.pool.start()
        self.purgatory = DelayedOperationPurgatory(
            "RemoteFetch",
            tick_ms=self.config.purgatory_tick_ms,
            wheel_size=self.config.purgatory_wheel_size,
        )
        self.purgatory.start()

    async def close(self) -> None:
        if self.purgatory is not None:
            await self.purgatory.close()
        await self.pool.close()
        self.index_cache.close()

    def gauges(self) -> dict[m.Metric, float]:
        return {
            m.REMOTE_LOG_READER_TASK_QUEUE_SIZE: self.pool.queue_size,
            m.REMOTE_LOG_READER_IDLE: self.pool.idle_percent(),
            m.REMOTE_FETCH_PURGATORY_DELAYED: (
                self.purgatory.delayed if self.purgatory is not None else 0
            ),
            m.REMOTE_INDEX_CACHE_SIZE: self.index_cache.size_bytes,
        }

    def _deadline_s(self, timeout_s: float | None) -> float:
        return timeout_s if timeout_s is not None else self.config.rpc_timeout_ms / 1000

    # -- Fetch ------------------------------------------------------------------------

    async def fetch(
        self,
        reads: list[PartitionRead],
        *,
        max_wait_ms: int,
        max_bytes: int,
        timeout_s: float | None = None,
    ) -> list[FetchResult]:
        if len(reads) > self.config.max_partitions:
            raise InvalidArgumentError(
                "partitions",
                f"{len(reads)} partitions exceed remote.fetch.max.partitions "
                f"({self.config.max_partitions})",
            )
        assert self.purgatory is not None, "start() first"
        wait_ms = max_wait_ms or self.config.fetch_max_wait_ms
        if timeout_s is not None:
            wait_ms = max(1, min(wait_ms, int(timeout_s * 1000)))
        deadline_s = wait_ms / 1000
        self.metrics.add(m.REMOTE_FETCH_REQUESTS, len(reads))
        if not await self._within_quota(deadline_s):
            return [FetchResult(read.partition, PartitionData()) for read in reads]
        futures = self.pool.submit_all([self._reading(read, deadline_s) for read in reads])
        answered: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        operation = DelayedRemoteFetch(wait_ms, futures, answered.set_result, self.metrics)
        key = ("remote-fetch", id(operation))
        purgatory = self.purgatory
        for future in futures:
            future.add_done_callback(lambda _: purgatory.check_and_complete(key))
        purgatory.try_complete_else_watch(operation, [key])
        try:
            outcomes = await answered
        finally:
            if not operation.is_completed:  # the caller went away: stop its reads
                operation.force_complete()
                operation.cancel_reads()
        results = self._assemble(reads, outcomes, max_bytes)
        if self.quota is not None:
            self.quota.record(sum(len(result.data.records) for result in results))
        return results

    async def _within_quota(self, wait_s: float) -> bool:
        """Whether remote reads may go: as Kafka skips them while the fetch quota is
        exceeded, but after waiting up to the fetch's wait, so a consumer that asks
        again at once is not answered empty in a loop."""
        if self.quota is None or (throttle_s := self.quota.throttle_seconds()) <= 0:
            return True
        self.metrics.record(m.REMOTE_FETCH_THROTTLE_TIME, throttle_s * 1000)
        await asyncio.sleep(min(throttle_s, wait_s))
        return self.quota.throttle_seconds() <= 0

    def _reading(self, read: PartitionRead, deadline_s: float) -> Callable[[], Any]:
        return lambda: self.reader.read(read, Deadline(deadline_s))

    def _assemble(
        self, reads: list[PartitionRead], outcomes: list[Outcome], max_bytes: int
    ) -> list[FetchResult]:
        results = []
        budget = max_bytes
        first_with_data = True
        for read, (kind, value) in zip(reads, outcomes, strict=True):
            if kind == "error":
                error = value if isinstance(value, RemoteLogError) else _internal(value, read)
                self.metrics.add(m.REMOTE_FETCH_ERRORS, 1)
                results.append(FetchResult(read.partition, PartitionData(), error))
                continue
            data = value if kind == "data" else PartitionData()
            if data.records:
                at_least_one = read.min_one_message and first_with_data
                data.records = _trim(data.records, max(budget, 0), at_least_one)
                if data.records:
                    first_with_data = False
                    budget -= len(data.records)
                    self.metrics.add(m.REMOTE_FETCH_BYTES, len(data.records))
                else:
                    data.aborted_transactions = []
            results.append(FetchResult(read.partition, data))
        return results

    # -- bulk read --------------------------------------------------------------------

    async def read_offset_range(
        self,
        partition: TopicIdPartition,
        start_offset: int,
        end_offset: int | None,
        *,
        chunk_bytes: int = 0,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[BulkChunk, None]:
        """Whole batches from the one holding `start_offset` to the one holding `end_offset - 1`.

        A producer task reads ahead up to `remote.fetch.bulk.read.ahead.chunks`
        chunks (crossing segments) while the caller sends the current one. A
        transient store failure resumes after the last batch handed out, with
        backoff, until the deadline. Where the store lends the segment's file,
        each chunk is a BatchMessage read straight from it (batch_file.py).
        """
        deadline = Deadline(self._deadline_s(timeout_s))
        chunk_bytes = chunk_bytes or self.config.bulk_chunk_bytes
        view, segment = await self.reader.locate(partition, start_offset, deadline)
        if end_offset is not None and end_offset <= start_offset:
            return
        queue: asyncio.Queue[BulkChunk | BaseException | None] = asyncio.Queue(
            self.config.bulk_read_ahead_chunks
        )
        producer = asyncio.create_task(
            self._produce_range(
                view, segment, _Range(start_offset, end_offset, chunk_bytes, queue), deadline
            )
        )
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                if self.quota is not None and (waited := await self.quota.acquire(item.size)):
                    self.metrics.record(m.REMOTE_FETCH_THROTTLE_TIME, waited * 1000)
                self.metrics.add(m.REMOTE_FETCH_BYTES, item.size)
                yield item
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer

    async def _produce_range(
        self,
        view: RemoteTierView,
        segment: RemoteLogSegmentMetadata | None,
        wanted: _Range,
        deadline: Deadline,
    ) -> None:
        attempts = 0
        try:
            while segment is not None:
                try:
                    done = await self._produce_segment(segment, wanted, deadline)
                except RemoteLogError as exc:
                    pause = self.reader.backoff.backoff_ms(attempts) / 1000
                    if not should_retry_call(exc) or (deadline.remaining() or 0) <= pause:
                        raise
                    attempts += 1
                    await asyncio.sleep(pause)
                    view, segment = await self.reader.locate(
                        view.partition, wanted.next_offset, deadline
                    )
                    continue
                attempts = 0
                if done:
                    break
                following = view.next_after(segment)
                if following is None:
                    # Tiered since the view was built? Look once more before ending.
                    view = await self.views.get(
                        view.partition, refresh=True, timeout_s=deadline.remaining()
                    )
                    following = view.next_after(segment)
                segment = following
            await wanted.queue.put(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await wanted.queue.put(exc)

    async def _produce_segment(
        self, segment: RemoteLogSegmentMetadata, wanted: _Range, deadline: Deadline
    ) -> bool:
        """Queue one segment's batches from `wanted.next_offset`; True when the range is done."""
        position = await self.reader.start_position(segment, wanted.next_offset, deadline)
        source = f"remote segment {segment.remote_log_segment_id}"
        opened = await self.reader.open_log_segment(segment, position, deadline)
        if opened is not None:
            try:
                return await self._produce_from_file(opened[0], segment, position, wanted, source)
            finally:
                os.close(opened[0])
        cutter = BatchCutter(wanted.next_offset, source, wanted.end_offset)
        stream = self.reader.segment_bytes(segment, position, deadline)
        try:
            async for chunk in stream:
                cutter.feed(chunk)
                while cutter.buffered >= wanted.chunk_bytes or cutter.reached_end:
                    taken = cutter.take_pieces(wanted.chunk_bytes, at_least_one=True)
                    if not await wanted.put(taken):
                        break
                if cutter.reached_end:
                    return True
        finally:
            await stream.aclose()
        await wanted.put(cutter.take_pieces(cutter.buffered, at_least_one=True))
        wanted.next_offset = max(wanted.next_offset, segment.end_offset + 1)
        return cutter.reached_end

    async def _produce_from_file(
        self,
        fd: int,
        segment: RemoteLogSegmentMetadata,
        position: int,
        wanted: _Range,
        source: str,
    ) -> bool:
        """As _produce_segment, each chunk read from the segment's file into its message."""
        while True:
            read = await read_batch_message(
                fd,
                position,
                segment.segment_size_in_bytes,
                max_bytes=wanted.chunk_bytes,
                from_offset=wanted.next_offset,
                until_offset=wanted.end_offset,
                source=source,
            )
            if read.message is not None:
                await wanted.put(read.message)
            if read.reached_end:
                return True
            if read.message is None:
                break
            position = read.next_position
        wanted.next_offset = max(wanted.next_offset, segment.end_offset + 1)
        return False

    # -- reads by URL -----------------------------------------------------------------

    async def locate_offset_range(
        self,
        partition: TopicIdPartition,
        start_offset: int,
        end_offset: int | None,
        *,
        max_segments: int = 0,
        chunks_accepted: bool = False,
        timeout_s: float | None = None,
    ) -> list[SegmentByteRange]:
        """Where the range's bytes lie, for a caller that reads them by URL (locate.py)."""
        deadline = Deadline(self._deadline_s(timeout_s))
        return await self.locator.locate(
            partition, start_offset, end_offset, max_segments, deadline, chunks_accepted
        )

    # -- ListOffsets ------------------------------------------------------------------

    async def list_offsets(
        self, partition: TopicIdPartition, timestamp: int, *, timeout_s: float | None = None
    ) -> OffsetAndEpoch | None:
        deadline = Deadline(self._deadline_s(timeout_s))
        view = await self.views.get(partition, refresh=True, timeout_s=deadline.remaining())
        if timestamp == EARLIEST_TIMESTAMP:
            offset = view.earliest_offset
            return None if offset is None else OffsetAndEpoch(offset, None, view.epoch_for(offset))
        if timestamp == LATEST_TIERED_TIMESTAMP:
            offset = view.latest_offset
            return None if offset is None else OffsetAndEpoch(offset, None, view.epoch_for(offset))
        if timestamp < 0:
            raise InvalidArgumentError(
                "timestamp", f"{timestamp} is neither -2, -5 nor a timestamp >= 0"
            )
        return await offset_for_timestamp(self.reader, view, timestamp, deadline)


def _internal(exc: BaseException, read: PartitionRead) -> RemoteLogError:
    log.error("remote read of %s failed", read.partition, exc_info=exc)
    return RemoteLogError(f"internal error reading {read.partition}")
