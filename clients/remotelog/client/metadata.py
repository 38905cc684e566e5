"""MetadataClient: what a broker (or the copy scheduler) calls as its RemoteLogMetadataManager.

Reads of a partition that is still loading answer METADATA_NOT_READY, which
the client retries within the call's deadline; metadata writes are idempotent
(Kafka allows every state to move to itself), so they are retried too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any

from remotelog.api.metadata.v1 import metadata_pb2 as pb
from remotelog.api.metadata.v1 import metadata_pb2_grpc as pb_grpc
from remotelog.client.base import ServiceClient
from remotelog.core.model import (
    RecoveredSegments,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionSummary,
    TopicIdPartition,
)
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.protocol.convert import (
    partition_delete_state_from_proto,
    partition_delete_to_proto,
    remote_partition_from_proto,
    segment_id_from_proto,
    segment_metadata_from_proto,
    segment_metadata_to_proto,
    segment_update_to_proto,
    topic_id_partition_to_proto,
)

# Segments per RecoverRemoteLogSegments message: far below the 4 MiB message limit.
RECOVER_BATCH = 500


class MetadataClient(ServiceClient):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._stub = pb_grpc.RemoteLogMetadataServiceStub(self.channel)  # type: ignore[no-untyped-call]

    # -- writes: return once the event is durable and visible to reads -------------

    async def add_remote_log_segment_metadata(
        self, metadata: RemoteLogSegmentMetadata, *, timeout_s: float | None = None
    ) -> None:
        request = pb.AddRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata=segment_metadata_to_proto(metadata)
        )
        await self.call_unary(self._stub.AddRemoteLogSegmentMetadata, request, timeout_s=timeout_s)

    async def update_remote_log_segment_metadata(
        self, update: RemoteLogSegmentMetadataUpdate, *, timeout_s: float | None = None
    ) -> None:
        request = pb.UpdateRemoteLogSegmentMetadataRequest(
            remote_log_segment_metadata_update=segment_update_to_proto(update)
        )
        await self.call_unary(
            self._stub.UpdateRemoteLogSegmentMetadata, request, timeout_s=timeout_s
        )

    async def put_remote_partition_delete_metadata(
        self, delete: RemotePartitionDeleteMetadata, *, timeout_s: float | None = None
    ) -> None:
        request = pb.PutRemotePartitionDeleteMetadataRequest(
            remote_partition_delete_metadata=partition_delete_to_proto(delete)
        )
        await self.call_unary(
            self._stub.PutRemotePartitionDeleteMetadata, request, timeout_s=timeout_s
        )

    # -- reads ------------------------------------------------------------------------

    async def remote_log_segment_metadata(
        self,
        partition: TopicIdPartition,
        leader_epoch: int,
        offset: int,
        *,
        timeout_s: float | None = None,
    ) -> RemoteLogSegmentMetadata | None:
        return await self._segment_at(
            self._stub.GetRemoteLogSegmentMetadata,
            pb.GetRemoteLogSegmentMetadataRequest,
            partition,
            leader_epoch,
            offset,
            timeout_s,
        )

    async def highest_offset_for_epoch(
        self, partition: TopicIdPartition, leader_epoch: int, *, timeout_s: float | None = None
    ) -> int | None:
        request = pb.GetHighestOffsetForEpochRequest(
            topic_id_partition=topic_id_partition_to_proto(partition), leader_epoch=leader_epoch
        )
        response = await self.call_unary(
            self._stub.GetHighestOffsetForEpoch, request, timeout_s=timeout_s
        )
        return response.offset if response.HasField("offset") else None

    async def list_remote_log_segments(
        self,
        partition: TopicIdPartition,
        leader_epoch: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> AsyncGenerator[RemoteLogSegmentMetadata, None]:
        """Every segment (of one epoch, or all) ascending by start offset, streamed."""
        request = pb.ListRemoteLogSegmentsRequest(
            topic_id_partition=topic_id_partition_to_proto(partition), leader_epoch=leader_epoch
        )
        responses = self.call_server_stream(
            self._stub.ListRemoteLogSegments, request, timeout_s=timeout_s
        )
        async with contextlib.aclosing(responses):
            async for response in responses:
                for segment in response.remote_log_segment_metadata:
                    yield segment_metadata_from_proto(segment)

    async def list_remote_partitions(
        self, topic: str | None = None, *, timeout_s: float | None = None
    ) -> list[RemotePartitionSummary]:
        """The partitions (of `topic`, or all) with data in the remote tier, by topic and
        partition; retried while the service is still loading the metadata topic."""
        request = pb.ListRemotePartitionsRequest(topic=topic or "")
        found: list[RemotePartitionSummary] = []
        responses = self.call_server_stream(
            self._stub.ListRemotePartitions, request, timeout_s=timeout_s
        )
        async with contextlib.aclosing(responses):
            async for response in responses:
                found.extend(remote_partition_from_proto(p) for p in response.partitions)
        return found

    async def remote_log_size(
        self, partition: TopicIdPartition, leader_epoch: int, *, timeout_s: float | None = None
    ) -> int:
        request = pb.GetRemoteLogSizeRequest(
            topic_id_partition=topic_id_partition_to_proto(partition), leader_epoch=leader_epoch
        )
        response = await self.call_unary(self._stub.GetRemoteLogSize, request, timeout_s=timeout_s)
        return int(response.remote_log_size_bytes)

    async def next_segment_with_txn_index(
        self,
        partition: TopicIdPartition,
        leader_epoch: int,
        offset: int,
        *,
        timeout_s: float | None = None,
    ) -> RemoteLogSegmentMetadata | None:
        return await self._segment_at(
            self._stub.GetNextSegmentWithTxnIndex,
            pb.GetNextSegmentWithTxnIndexRequest,
            partition,
            leader_epoch,
            offset,
            timeout_s,
        )

    async def _segment_at(
        self,
        method: Any,
        request_type: Any,
        partition: TopicIdPartition,
        leader_epoch: int,
        offset: int,
        timeout_s: float | None,
    ) -> RemoteLogSegmentMetadata | None:
        """The (epoch, offset) lookups: a request of `request_type`, an optional segment back."""
        request = request_type(
            topic_id_partition=topic_id_partition_to_proto(partition),
            leader_epoch=leader_epoch,
            offset=offset,
        )
        response = await self.call_unary(method, request, timeout_s=timeout_s)
        if not response.HasField("remote_log_segment_metadata"):
            return None
        return segment_metadata_from_proto(response.remote_log_segment_metadata)

    # -- partitions served ---------------------------------------------------------------

    async def on_partition_leadership_changes(
        self,
        leaders: Iterable[TopicIdPartition],
        followers: Iterable[TopicIdPartition] = (),
        *,
        timeout_s: float | None = None,
    ) -> None:
        request = pb.OnPartitionLeadershipChangesRequest(
            leader_partitions=[topic_id_partition_to_proto(p) for p in leaders],
            follower_partitions=[topic_id_partition_to_proto(p) for p in followers],
        )
        await self.call_unary(self._stub.OnPartitionLeadershipChanges, request, timeout_s=timeout_s)

    async def on_stop_partitions(
        self, partitions: Iterable[TopicIdPartition], *, timeout_s: float | None = None
    ) -> None:
        request = pb.OnStopPartitionsRequest(
            partitions=[topic_id_partition_to_proto(p) for p in partitions]
        )
        await self.call_unary(self._stub.OnStopPartitions, request, timeout_s=timeout_s)

    async def remote_partition_delete_state(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> RemotePartitionDeleteState | None:
        """The partition's deletion state; None when it was never marked."""
        request = pb.GetRemotePartitionDeleteStateRequest(
            topic_id_partition=topic_id_partition_to_proto(partition)
        )
        response = await self.call_unary(
            self._stub.GetRemotePartitionDeleteState, request, timeout_s=timeout_s
        )
        if response.state == 0:
            return None
        return partition_delete_state_from_proto(response.state, "state")

    async def is_ready(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> bool:
        request = pb.IsReadyRequest(topic_id_partition=topic_id_partition_to_proto(partition))
        response = await self.call_unary(self._stub.IsReady, request, timeout_s=timeout_s)
        return bool(response.ready)

    async def recover_remote_log_segments(
        self,
        partition: TopicIdPartition,
        segments: Sequence[RemoteLogSegmentMetadata],
        *,
        recovery: str,
        dry_run: bool = False,
        timeout_s: float | None = None,
    ) -> RecoveredSegments:
        """The partition's segments (as their copies finished) written where the manager
        does not know them, RECOVER_BATCH a message; each message gets the call's timeout.
        Retried whole while the manager is unavailable: known segments are left alone."""
        tip = topic_id_partition_to_proto(partition)

        async def requests() -> AsyncIterator[pb.RecoverRemoteLogSegmentsRequest]:
            yield pb.RecoverRemoteLogSegmentsRequest(
                topic_id_partition=tip,
                recovery=recovery,
                dry_run=dry_run,
                remote_log_segment_metadata=[
                    segment_metadata_to_proto(s) for s in segments[:RECOVER_BATCH]
                ],
            )
            for start in range(RECOVER_BATCH, len(segments), RECOVER_BATCH):
                yield pb.RecoverRemoteLogSegmentsRequest(
                    remote_log_segment_metadata=[
                        segment_metadata_to_proto(s)
                        for s in segments[start : start + RECOVER_BATCH]
                    ]
                )

        timeout = (timeout_s or self.options.timeout_s) * (1 + len(segments) // RECOVER_BATCH)
        response = await self.call_client_stream(
            self._stub.RecoverRemoteLogSegments, requests, timeout_s=timeout
        )
        return RecoveredSegments(
            tuple(segment_id_from_proto(i, "written") for i in response.written),
            tuple(segment_id_from_proto(i, "completed") for i in response.completed),
        )
