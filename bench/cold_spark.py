"""The Spark side of bench/cold_reads.py: `spark.read.format("remotelog")` over a cold
tiered topic, against the same ranged GETs of S3 with only their bytes counted.

Spark's tasks read S3 themselves, by the URLs the fetch service locates
(remotelog.client.url_ranges). The raw contender plans the same tasks (the source's
own cuts: `remotelog.maxBytesPerPartition` of segments each), runs as many at once
as Spark's `local[2]` does, and issues each task's GETs with the same reader and
the same GETs in flight; it neither cuts batches nor decodes them. Its time is what
the link and the GETs alone cost, so the ratio is what decoding and Spark add.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from remotelog.client import MetadataClient, RemoteFetchClient
from remotelog.client.url_ranges import UrlRangeReader
from remotelog.core.model import RemotePartitionSummary, TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.spark_session import local_session
from remotelog.spark.options import DEFAULT_MAX_BYTES_PER_PARTITION
from remotelog.spark.planning import segment_cuts

# Tasks Spark runs at once: local[2].
SPARK_CORES = 2


@dataclass
class SparkReads:
    fetch_address: str
    metadata_address: str

    def __post_init__(self) -> None:
        self.spark: Any = local_session(
            "remotelog-bench-cold-reads",
            {"spark.driver.memory": "1g", "spark.ui.showConsoleProgress": "false"},
            cores=SPARK_CORES,
        )

    def frame(self, topic: str, **options: str) -> Any:
        return (
            self.spark.read.format("remotelog")
            .option("remotelog.fetch.address", self.fetch_address)
            .option("remotelog.metadata.address", self.metadata_address)
            .option("subscribe", topic)
            .options(**options)
            .load()
        )

    def warm_up(self, topic: str) -> None:
        """A query of the topic's first records: Spark's Python workers started, the
        session's first-query costs paid before anything is timed."""
        self.frame(topic, endingOffsets=json.dumps({topic: {"0": 100}})).count()

    def spark_read(self, topic: str, **options: str) -> tuple[float, int, int]:
        """Seconds to read the topic's tiered records and add up their values; the rows
        and value bytes read."""
        began = time.perf_counter()
        ((rows, value_bytes),) = (
            self.frame(topic, **options).selectExpr("count(*)", "sum(length(value))").collect()
        )
        return time.perf_counter() - began, int(rows), int(value_bytes or 0)

    def raw_read(self, topic: str) -> tuple[float, int, RemotePartitionSummary]:
        """Seconds for the same ranged GETs, counting their bytes; the bytes, and the
        partition's remote summary."""
        return asyncio.run(self._raw(topic))

    async def _raw(self, topic: str) -> tuple[float, int, RemotePartitionSummary]:
        fetch = RemoteFetchClient(self.fetch_address)
        metadata = MetadataClient(self.metadata_address)
        try:
            (summary,) = await metadata.list_remote_partitions(topic)
            tip = summary.topic_id_partition
            segments = [
                (s.end_offset + 1, s.segment_size_in_bytes)
                async for s in metadata.list_remote_log_segments(tip)
                if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ]
            start, end = summary.earliest_offset, summary.latest_tiered_offset + 1
            edges = [start, *segment_cuts(segments, start, end, DEFAULT_MAX_BYTES_PER_PARTITION)]
            tasks = list(zip(edges, [*edges[1:], end], strict=True))
            slots = asyncio.Semaphore(SPARK_CORES)
            began = time.perf_counter()
            counted = await asyncio.gather(*(_task(fetch, tip, a, b, slots) for a, b in tasks))
            return time.perf_counter() - began, sum(counted), summary
        finally:
            await fetch.close()
            await metadata.close()

    def stop(self) -> None:
        self.spark.stop()


async def _task(
    fetch: RemoteFetchClient, tip: TopicIdPartition, start: int, end: int, slots: asyncio.Semaphore
) -> int:
    """One task's GETs, as a Spark task makes them (a reader of its own), counted."""
    async with slots:
        reader = UrlRangeReader(fetch)
        try:
            counted = 0
            async for _, pieces in reader.ranges(tip, start, end):
                counted += sum(len(piece) for piece in pieces)
            return counted
        finally:
            await reader.close()
