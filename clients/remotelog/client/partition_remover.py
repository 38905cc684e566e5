"""PartitionRemoverClient: what a controller calls when a topic is deleted; status for operators."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from remotelog.api.remover.v1 import partition_remover_pb2 as pb
from remotelog.api.remover.v1 import partition_remover_pb2_grpc as pb_grpc
from remotelog.api.type.v1 import error_pb2
from remotelog.client.base import ServiceClient
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.protocol.convert import (
    partition_delete_state_from_proto,
    topic_id_partition_from_proto,
    topic_id_partition_to_proto,
)

_PREFIX = "ERROR_REASON_"


@dataclass(frozen=True)
class PartitionDeletionStatus:
    """How far the deletion of one partition's remote data got."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    segments_remaining: int
    event_timestamp_ms: int
    # The reason and message of the last failed attempt; "" when none failed.
    last_error_reason: str = ""
    last_error_message: str = ""

    @classmethod
    def from_proto(cls, message: pb.DeletionStatus) -> PartitionDeletionStatus:
        reason = ""
        if message.last_error_reason != error_pb2.ERROR_REASON_UNSPECIFIED:
            reason = error_pb2.ErrorReason.Name(message.last_error_reason).removeprefix(_PREFIX)
        return cls(
            topic_id_partition_from_proto(message.topic_id_partition, "topic_id_partition"),
            partition_delete_state_from_proto(message.state, "state"),
            message.segments_remaining,
            message.event_timestamp_ms,
            reason,
            message.last_error_message,
        )


class PartitionRemoverClient(ServiceClient):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._stub = pb_grpc.PartitionRemoverServiceStub(self.channel)  # type: ignore[no-untyped-call]

    async def mark_partitions_for_deletion(
        self,
        partitions: Iterable[TopicIdPartition],
        broker_id: int = 0,
        *,
        timeout_s: float | None = None,
    ) -> None:
        """Publish DELETE_PARTITION_MARKED for each partition (safe to repeat)."""
        request = pb.MarkPartitionsForDeletionRequest(
            partitions=[topic_id_partition_to_proto(p) for p in partitions], broker_id=broker_id
        )
        await self.call_unary(self._stub.MarkPartitionsForDeletion, request, timeout_s=timeout_s)

    async def deletion_status(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> PartitionDeletionStatus:
        """Raises UnknownTopicOrPartitionError when the partition was never marked."""
        request = pb.GetDeletionStatusRequest(
            topic_id_partition=topic_id_partition_to_proto(partition)
        )
        response = await self.call_unary(self._stub.GetDeletionStatus, request, timeout_s=timeout_s)
        return PartitionDeletionStatus.from_proto(response.deletion_status)

    async def pending_deletions(
        self, *, timeout_s: float | None = None
    ) -> list[PartitionDeletionStatus]:
        """Partitions marked or started and not finished, by topic and partition."""
        response = await self.call_unary(
            self._stub.ListPendingDeletions, pb.ListPendingDeletionsRequest(), timeout_s=timeout_s
        )
        return [PartitionDeletionStatus.from_proto(s) for s in response.deletion_statuses]
