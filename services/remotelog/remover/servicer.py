"""PartitionRemoverService: protobuf in, remover calls, protobuf out. Nothing else.

Errors are domain exceptions; the server's interceptor maps them to statuses.
"""

from __future__ import annotations

import grpc

from remotelog.api.remover.v1 import partition_remover_pb2 as pb
from remotelog.api.remover.v1 import partition_remover_pb2_grpc as pb_grpc
from remotelog.core.errors import InvalidArgumentError
from remotelog.protocol.convert import (
    error_reason_to_proto,
    non_negative,
    partition_delete_state_to_proto,
    topic_id_partition_field,
    topic_id_partition_to_proto,
    topic_id_partitions_from_proto,
)
from remotelog.remover.remover import PartitionRemover
from remotelog.remover.tracker import DeletionStatus


def status_to_proto(status: DeletionStatus) -> pb.DeletionStatus:
    return pb.DeletionStatus(
        topic_id_partition=topic_id_partition_to_proto(status.topic_id_partition),
        state=partition_delete_state_to_proto(status.state),
        segments_remaining=status.segments_remaining,
        event_timestamp_ms=status.event_timestamp_ms,
        last_error_reason=error_reason_to_proto(status.last_error_reason),
        last_error_message=status.last_error_message,
    )


class PartitionRemoverServicer(pb_grpc.PartitionRemoverServiceServicer):
    def __init__(self, remover: PartitionRemover) -> None:
        self.remover = remover

    async def MarkPartitionsForDeletion(
        self, request: pb.MarkPartitionsForDeletionRequest, context: grpc.aio.ServicerContext
    ) -> pb.MarkPartitionsForDeletionResponse:
        if not request.partitions:
            raise InvalidArgumentError("partitions", "name at least one partition")
        non_negative(request.broker_id, "broker_id")
        partitions = topic_id_partitions_from_proto(request.partitions, "partitions")
        await self.remover.mark_partitions_for_deletion(partitions, request.broker_id)
        return pb.MarkPartitionsForDeletionResponse()

    async def GetDeletionStatus(
        self, request: pb.GetDeletionStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetDeletionStatusResponse:
        status = await self.remover.deletion_status(topic_id_partition_field(request))
        return pb.GetDeletionStatusResponse(deletion_status=status_to_proto(status))

    async def ListPendingDeletions(
        self, request: pb.ListPendingDeletionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPendingDeletionsResponse:
        pending = await self.remover.pending_deletions()
        return pb.ListPendingDeletionsResponse(
            deletion_statuses=[status_to_proto(s) for s in pending]
        )
