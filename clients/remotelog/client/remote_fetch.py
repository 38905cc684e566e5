"""RemoteFetchClient: what a broker (or an analytics reader) calls to read tiered offsets."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

from remotelog.api.fetch.v1 import remote_fetch_pb2 as pb
from remotelog.api.fetch.v1 import remote_fetch_pb2_grpc as pb_grpc
from remotelog.api.type.v1 import error_pb2
from remotelog.client.base import ServiceClient, bulk_method, bulk_stream
from remotelog.core.errors import ERRORS_BY_REASON, RemoteLogError
from remotelog.core.model import SegmentByteRange, TopicIdPartition
from remotelog.protocol.codecs import FETCH_RESPONSE, READ_OFFSET_RANGE_RESPONSE
from remotelog.protocol.convert import (
    byte_range_from_proto,
    topic_id_partition_from_proto,
    topic_id_partition_to_proto,
)


@dataclass(frozen=True)
class FetchPartition:
    topic_id_partition: TopicIdPartition
    fetch_offset: int
    partition_max_bytes: int = 1024 * 1024
    leader_epoch: int | None = None


@dataclass(frozen=True)
class FetchedPartition:
    """One partition's answer; `error` is set instead of raising, as in a Kafka fetch."""

    topic_id_partition: TopicIdPartition
    records: bytes = b""
    aborted_transactions: list[tuple[int, int]] = field(default_factory=list)
    log_start_offset: int = -1
    error: RemoteLogError | None = None


@dataclass(frozen=True)
class RecordChunk:
    """Whole batches of a bulk read.

    `records` is a read-only view of the message the chunk arrived in, not a
    copy: at bulk-read rates, copying every chunk out is a large share of the
    reader's CPU.
    Anything that reads buffers (struct, the record decoder, a file's write)
    takes it as it is; `bytes(records)` makes bytes of it.
    """

    records: bytes | memoryview
    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int | None
    leader_epoch: int | None


def _error(result: pb.FetchPartitionResult) -> RemoteLogError | None:
    if result.error_reason == error_pb2.ERROR_REASON_UNSPECIFIED:
        return None
    reason = error_pb2.ErrorReason.Name(result.error_reason).removeprefix("ERROR_REASON_")
    return ERRORS_BY_REASON.get(reason, RemoteLogError).rebuild(result.error_message, {})


class RemoteFetchClient(ServiceClient):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._stub = pb_grpc.RemoteFetchServiceStub(self.channel)  # type: ignore[no-untyped-call]
        methods = pb.DESCRIPTOR.services_by_name["RemoteFetchService"].methods_by_name
        self._fetch = bulk_method(self.channel, methods["Fetch"], FETCH_RESPONSE.decode)
        self._read_offset_range = bulk_stream(
            self.channel,
            methods["ReadOffsetRange"],
            READ_OFFSET_RANGE_RESPONSE,
            views=True,
        )

    async def fetch(
        self,
        partitions: Sequence[FetchPartition],
        *,
        max_bytes: int = 50 * 1024 * 1024,
        max_wait_ms: int = 0,
        read_committed: bool = False,
        min_one_message: bool = True,
        timeout_s: float | None = None,
    ) -> list[FetchedPartition]:
        """Fetch many partitions at once; answers in request order."""
        request = pb.FetchRequest(
            partitions=[
                pb.FetchPartition(
                    topic_id_partition=topic_id_partition_to_proto(p.topic_id_partition),
                    fetch_offset=p.fetch_offset,
                    partition_max_bytes=p.partition_max_bytes,
                    leader_epoch=p.leader_epoch,
                )
                for p in partitions
            ],
            isolation_level=(
                pb.ISOLATION_LEVEL_READ_COMMITTED
                if read_committed
                else pb.ISOLATION_LEVEL_READ_UNCOMMITTED
            ),
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
            min_one_message=min_one_message,
        )
        response = await self.call_unary(self._fetch, request, timeout_s=timeout_s)
        return [
            FetchedPartition(
                topic_id_partition_from_proto(r.topic_id_partition),
                records,
                [(a.producer_id, a.first_offset) for a in r.aborted_transactions],
                r.log_start_offset,
                _error(r),
            )
            for r, records in response
        ]

    async def read_offset_range(
        self,
        partition: TopicIdPartition,
        start_offset: int,
        end_offset: int | None = None,
        *,
        chunk_bytes: int = 0,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[RecordChunk, None]:
        """Whole batches from the one holding `start_offset` to the one holding `end_offset - 1`."""
        request = pb.ReadOffsetRangeRequest(
            topic_id_partition=topic_id_partition_to_proto(partition),
            start_offset=start_offset,
            end_offset=end_offset,
            chunk_bytes=chunk_bytes,
        )
        responses = self.call_server_stream(self._read_offset_range, request, timeout_s=timeout_s)
        async with contextlib.aclosing(responses):
            async for records, (first_offset, last_offset) in responses:
                yield RecordChunk(records, first_offset, last_offset)

    async def locate_offset_range(
        self,
        partition: TopicIdPartition,
        start_offset: int,
        end_offset: int | None = None,
        *,
        max_segments: int = 0,
        chunks_accepted: bool = False,
        timeout_s: float | None = None,
    ) -> list[SegmentByteRange]:
        """Where the range's bytes lie: per segment from the one holding `start_offset`, a
        URL of its log and the bytes to read of it; with `chunks_accepted`, a segment
        stored as chunks too, with its `chunks` to decode them by. UnsupportedOperationError
        where the service hands out no URLs (read_offset_range reads the same)."""
        request = pb.LocateOffsetRangeRequest(
            topic_id_partition=topic_id_partition_to_proto(partition),
            start_offset=start_offset,
            end_offset=end_offset,
            max_segments=max_segments,
            chunks_accepted=chunks_accepted,
        )
        response = await self.call_unary(self._stub.LocateOffsetRange, request, timeout_s=timeout_s)
        return [byte_range_from_proto(r) for r in response.segments]

    async def list_offsets(
        self, partition: TopicIdPartition, timestamp: int, *, timeout_s: float | None = None
    ) -> OffsetAndTimestamp | None:
        """-2 earliest remote offset, -5 latest tiered, >= 0 first offset at or after a time."""
        request = pb.ListOffsetsRequest(
            topic_id_partition=topic_id_partition_to_proto(partition), timestamp=timestamp
        )
        response = await self.call_unary(self._stub.ListOffsets, request, timeout_s=timeout_s)
        if not response.HasField("offset"):
            return None
        return OffsetAndTimestamp(
            response.offset,
            response.timestamp if response.HasField("timestamp") else None,
            response.leader_epoch if response.HasField("leader_epoch") else None,
        )
