"""CopySchedulerService: protobuf in, scheduler calls, protobuf out. Nothing else.

Errors are domain exceptions; the server's interceptor maps them to statuses.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from remotelog.api.scheduler.v1 import copy_scheduler_pb2 as pb
from remotelog.api.scheduler.v1 import copy_scheduler_pb2_grpc as pb_grpc
from remotelog.core.errors import InvalidArgumentError
from remotelog.protocol.convert import (
    error_reason_to_proto,
    topic_id_partition_field,
    topic_id_partition_to_proto,
)
from remotelog.scheduler.partition import Assignment, Role
from remotelog.scheduler.scheduler import CopyScheduler

_ROLES = {Role.LEADER: pb.PARTITION_ROLE_LEADER, Role.FOLLOWER: pb.PARTITION_ROLE_FOLLOWER}


def _optional(message: pb.PartitionAssignment, name: str) -> int | None:
    return getattr(message, name) if message.HasField(name) else None


def assignment_from_proto(message: pb.PartitionAssignment, role: Role, field: str) -> Assignment:
    if not message.log_dir:
        raise InvalidArgumentError(f"{field}.log_dir", "is required")
    return Assignment(
        topic_id_partition_field(message, field),
        Path(message.log_dir),
        message.leader_epoch,
        role,
        retention_ms=_optional(message, "retention_ms"),
        retention_bytes=_optional(message, "retention_bytes"),
        local_retention_ms=_optional(message, "local_retention_ms"),
        local_retention_bytes=_optional(message, "local_retention_bytes"),
    )


class CopySchedulerServicer(pb_grpc.CopySchedulerServiceServicer):
    def __init__(self, scheduler: CopyScheduler) -> None:
        self.scheduler = scheduler

    async def OnPartitionLeadershipChanges(
        self, request: pb.OnPartitionLeadershipChangesRequest, context: grpc.aio.ServicerContext
    ) -> pb.OnPartitionLeadershipChangesResponse:
        leaders = [
            assignment_from_proto(m, Role.LEADER, f"leaders[{i}]")
            for i, m in enumerate(request.leaders)
        ]
        followers = [
            assignment_from_proto(m, Role.FOLLOWER, f"followers[{i}]")
            for i, m in enumerate(request.followers)
        ]
        await self.scheduler.on_partition_leadership_changes(leaders, followers)
        return pb.OnPartitionLeadershipChangesResponse()

    async def StopPartitions(
        self, request: pb.StopPartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopPartitionsResponse:
        partitions = [
            (topic_id_partition_field(p, f"partitions[{i}]"), p.delete_remote_log)
            for i, p in enumerate(request.partitions)
        ]
        await self.scheduler.stop_partitions(partitions)
        return pb.StopPartitionsResponse()

    async def UpdateLogStartOffset(
        self, request: pb.UpdateLogStartOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateLogStartOffsetResponse:
        self.scheduler.update_log_start_offset(
            topic_id_partition_field(request), request.log_start_offset
        )
        return pb.UpdateLogStartOffsetResponse()

    async def GetPartitionState(
        self, request: pb.GetPartitionStateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPartitionStateResponse:
        view = self.scheduler.partition_state(topic_id_partition_field(request))
        error = view.last_error
        reason = error_reason_to_proto("" if error is None else error.reason)
        state = pb.PartitionState(
            topic_id_partition=topic_id_partition_to_proto(view.topic_id_partition),
            role=_ROLES[view.role],
            highest_tiered_offset=view.highest_tiered_offset,
            local_log_start_offset=view.local_log_start_offset,
            log_start_offset=view.log_start_offset,
            copy_lag_bytes=view.copy_lag_bytes,
            copy_lag_segments=view.copy_lag_segments,
            last_error_reason=reason,
            last_error_message="" if error is None else str(error),
            next_run_time_ms=view.next_run_time_ms,
            effective_retention_ms=view.retention.retention_ms,
            effective_retention_bytes=view.retention.retention_bytes,
            effective_local_retention_ms=view.retention.local_retention_ms,
            effective_local_retention_bytes=view.retention.local_retention_bytes,
            segments_deleted_before_tiering=view.segments_deleted_before_tiering,
            copy_lag_ms=view.copy_lag_ms,
        )
        return pb.GetPartitionStateResponse(partition_state=state)

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOffsetsResponse:
        offset, epoch = await self.scheduler.list_offsets(
            topic_id_partition_field(request), request.timestamp
        )
        return pb.ListOffsetsResponse(offset=offset, leader_epoch=epoch)
