"""RemoteLogMetadataService: protobuf in, manager calls, protobuf out. Nothing else.

Errors are domain exceptions; the server's interceptor maps them to statuses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc

from remotelog.api.metadata.v1 import metadata_pb2 as pb
from remotelog.api.metadata.v1 import metadata_pb2_grpc as pb_grpc
from remotelog.core.deadline import deadline_after
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import RemoteLogSegmentMetadata
from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager
from remotelog.protocol.convert import (
    non_negative,
    partition_delete_from_proto,
    partition_delete_state_to_proto,
    remote_partition_to_proto,
    require,
    segment_id_to_proto,
    segment_metadata_from_proto,
    segment_metadata_to_proto,
    segment_update_from_proto,
    topic_id_partition_field,
    topic_id_partitions_from_proto,
)

# Segments per ListRemoteLogSegments message: large enough to amortise a
# message, small enough to stay far below the 4 MiB default message limit.
LIST_BATCH = 500


class MetadataServicer(pb_grpc.RemoteLogMetadataServiceServicer):
    def __init__(self, manager: TopicBasedRemoteLogMetadataManager) -> None:
        self.manager = manager

    async def AddRemoteLogSegmentMetadata(
        self, request: pb.AddRemoteLogSegmentMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddRemoteLogSegmentMetadataResponse:
        require(request, "remote_log_segment_metadata", "remote_log_segment_metadata")
        metadata = segment_metadata_from_proto(request.remote_log_segment_metadata)
        with deadline_after(context.time_remaining()):
            await self.manager.add_remote_log_segment_metadata(metadata)
        return pb.AddRemoteLogSegmentMetadataResponse()

    async def UpdateRemoteLogSegmentMetadata(
        self,
        request: pb.UpdateRemoteLogSegmentMetadataRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.UpdateRemoteLogSegmentMetadataResponse:
        field = "remote_log_segment_metadata_update"
        require(request, field, field)
        update = segment_update_from_proto(request.remote_log_segment_metadata_update)
        with deadline_after(context.time_remaining()):
            await self.manager.update_remote_log_segment_metadata(update)
        return pb.UpdateRemoteLogSegmentMetadataResponse()

    async def PutRemotePartitionDeleteMetadata(
        self,
        request: pb.PutRemotePartitionDeleteMetadataRequest,
        context: grpc.aio.ServicerContext,
    ) -> pb.PutRemotePartitionDeleteMetadataResponse:
        field = "remote_partition_delete_metadata"
        require(request, field, field)
        delete = partition_delete_from_proto(request.remote_partition_delete_metadata)
        with deadline_after(context.time_remaining()):
            await self.manager.put_remote_partition_delete_metadata(delete)
        return pb.PutRemotePartitionDeleteMetadataResponse()

    async def GetRemoteLogSegmentMetadata(
        self, request: pb.GetRemoteLogSegmentMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRemoteLogSegmentMetadataResponse:
        found = await self.manager.remote_log_segment_metadata(
            topic_id_partition_field(request),
            non_negative(request.leader_epoch, "leader_epoch"),
            non_negative(request.offset, "offset"),
        )
        if found is None:
            return pb.GetRemoteLogSegmentMetadataResponse()
        return pb.GetRemoteLogSegmentMetadataResponse(
            remote_log_segment_metadata=segment_metadata_to_proto(found)
        )

    async def GetHighestOffsetForEpoch(
        self, request: pb.GetHighestOffsetForEpochRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetHighestOffsetForEpochResponse:
        offset = await self.manager.highest_offset_for_epoch(
            topic_id_partition_field(request), non_negative(request.leader_epoch, "leader_epoch")
        )
        return pb.GetHighestOffsetForEpochResponse(offset=offset)

    async def ListRemoteLogSegments(
        self, request: pb.ListRemoteLogSegmentsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListRemoteLogSegmentsResponse]:
        epoch = (
            non_negative(request.leader_epoch, "leader_epoch")
            if request.HasField("leader_epoch")
            else None
        )
        segments = self.manager.remote_log_segments(topic_id_partition_field(request), epoch)
        for start in range(0, len(segments), LIST_BATCH):
            yield pb.ListRemoteLogSegmentsResponse(
                remote_log_segment_metadata=[
                    segment_metadata_to_proto(m) for m in segments[start : start + LIST_BATCH]
                ]
            )

    async def GetRemoteLogSize(
        self, request: pb.GetRemoteLogSizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRemoteLogSizeResponse:
        size = await self.manager.remote_log_size(
            topic_id_partition_field(request), non_negative(request.leader_epoch, "leader_epoch")
        )
        return pb.GetRemoteLogSizeResponse(remote_log_size_bytes=size)

    async def GetNextSegmentWithTxnIndex(
        self, request: pb.GetNextSegmentWithTxnIndexRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetNextSegmentWithTxnIndexResponse:
        found = await self.manager.next_segment_with_txn_index(
            topic_id_partition_field(request),
            non_negative(request.leader_epoch, "leader_epoch"),
            non_negative(request.offset, "offset"),
        )
        if found is None:
            return pb.GetNextSegmentWithTxnIndexResponse()
        return pb.GetNextSegmentWithTxnIndexResponse(
            remote_log_segment_metadata=segment_metadata_to_proto(found)
        )

    async def OnPartitionLeadershipChanges(
        self, request: pb.OnPartitionLeadershipChangesRequest, context: grpc.aio.ServicerContext
    ) -> pb.OnPartitionLeadershipChangesResponse:
        leaders = topic_id_partitions_from_proto(request.leader_partitions, "leader_partitions")
        followers = topic_id_partitions_from_proto(
            request.follower_partitions, "follower_partitions"
        )
        await self.manager.on_partition_leadership_changes(leaders, followers)
        return pb.OnPartitionLeadershipChangesResponse()

    async def OnStopPartitions(
        self, request: pb.OnStopPartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.OnStopPartitionsResponse:
        partitions = topic_id_partitions_from_proto(request.partitions, "partitions")
        await self.manager.on_stop_partitions(partitions)
        return pb.OnStopPartitionsResponse()

    async def GetRemotePartitionDeleteState(
        self, request: pb.GetRemotePartitionDeleteStateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRemotePartitionDeleteStateResponse:
        state = await self.manager.remote_partition_delete_state(topic_id_partition_field(request))
        if state is None:
            return pb.GetRemotePartitionDeleteStateResponse()
        return pb.GetRemotePartitionDeleteStateResponse(
            state=partition_delete_state_to_proto(state)
        )

    async def IsReady(
        self, request: pb.IsReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.IsReadyResponse:
        ready = await self.manager.is_ready(topic_id_partition_field(request))
        return pb.IsReadyResponse(ready=ready)

    async def ListRemotePartitions(
        self, request: pb.ListRemotePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListRemotePartitionsResponse]:
        partitions = await self.manager.list_remote_partitions(request.topic or None)
        for start in range(0, len(partitions), LIST_BATCH):
            yield pb.ListRemotePartitionsResponse(
                partitions=[
                    remote_partition_to_proto(p) for p in partitions[start : start + LIST_BATCH]
                ]
            )

    async def RecoverRemoteLogSegments(
        self,
        request_iterator: AsyncIterator[pb.RecoverRemoteLogSegmentsRequest],
        context: grpc.aio.ServicerContext,
    ) -> pb.RecoverRemoteLogSegmentsResponse:
        first = await anext(request_iterator, None)
        if first is None:
            raise InvalidArgumentError("topic_id_partition", "is required")
        partition = topic_id_partition_field(first)
        if not first.recovery.strip():
            raise InvalidArgumentError("recovery", "is required: it names the run")
        field = "remote_log_segment_metadata"

        def segments(request: pb.RecoverRemoteLogSegmentsRequest) -> list[RemoteLogSegmentMetadata]:
            if request.HasField("topic_id_partition") and (
                topic_id_partition_field(request) != partition
            ):
                raise InvalidArgumentError("topic_id_partition", f"must stay {partition}")
            return [
                segment_metadata_from_proto(m, f"{field}[{i}]")
                for i, m in enumerate(request.remote_log_segment_metadata)
            ]

        async def batches() -> AsyncIterator[Sequence[RemoteLogSegmentMetadata]]:
            yield segments(first)
            async for request in request_iterator:
                yield segments(request)

        with deadline_after(context.time_remaining()):
            recovered = await self.manager.recoveries.recover_batches(
                partition, batches(), recovery=first.recovery, dry_run=first.dry_run
            )
        return pb.RecoverRemoteLogSegmentsResponse(
            written=[segment_id_to_proto(i) for i in recovered.written],
            completed=[segment_id_to_proto(i) for i in recovered.completed],
        )
