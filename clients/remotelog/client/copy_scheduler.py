"""CopySchedulerClient: what a broker calls to hand its partitions to the copy scheduler."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from remotelog.api.scheduler.v1 import copy_scheduler_pb2 as pb
from remotelog.api.scheduler.v1 import copy_scheduler_pb2_grpc as pb_grpc
from remotelog.client.base import ServiceClient
from remotelog.core.model import TopicIdPartition
from remotelog.protocol.convert import topic_id_partition_to_proto

PartitionState = pb.PartitionState


@dataclass(frozen=True)
class PartitionAssignment:
    """A partition the broker leads or follows, with its directory and topic-level retention."""

    topic_id_partition: TopicIdPartition
    log_dir: Path
    leader_epoch: int
    retention_ms: int | None = None
    retention_bytes: int | None = None
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None

    def to_proto(self) -> pb.PartitionAssignment:
        return pb.PartitionAssignment(
            topic_id_partition=topic_id_partition_to_proto(self.topic_id_partition),
            log_dir=str(self.log_dir),
            leader_epoch=self.leader_epoch,
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            local_retention_ms=self.local_retention_ms,
            local_retention_bytes=self.local_retention_bytes,
        )


class CopySchedulerClient(ServiceClient):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._stub = pb_grpc.CopySchedulerServiceStub(self.channel)  # type: ignore[no-untyped-call]

    async def on_partition_leadership_changes(
        self,
        leaders: Iterable[PartitionAssignment],
        followers: Iterable[PartitionAssignment] = (),
        *,
        timeout_s: float | None = None,
    ) -> None:
        request = pb.OnPartitionLeadershipChangesRequest(
            leaders=[a.to_proto() for a in leaders], followers=[a.to_proto() for a in followers]
        )
        await self.call_unary(self._stub.OnPartitionLeadershipChanges, request, timeout_s=timeout_s)

    async def stop_partitions(
        self,
        partitions: Iterable[TopicIdPartition],
        *,
        delete_remote_log: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        request = pb.StopPartitionsRequest(
            partitions=[
                pb.StopPartition(
                    topic_id_partition=topic_id_partition_to_proto(p),
                    delete_remote_log=delete_remote_log,
                )
                for p in partitions
            ]
        )
        await self.call_unary(self._stub.StopPartitions, request, timeout_s=timeout_s)

    async def update_log_start_offset(
        self, partition: TopicIdPartition, log_start_offset: int, *, timeout_s: float | None = None
    ) -> None:
        request = pb.UpdateLogStartOffsetRequest(
            topic_id_partition=topic_id_partition_to_proto(partition),
            log_start_offset=log_start_offset,
        )
        await self.call_unary(self._stub.UpdateLogStartOffset, request, timeout_s=timeout_s)

    async def partition_state(
        self, partition: TopicIdPartition, *, timeout_s: float | None = None
    ) -> pb.PartitionState:
        request = pb.GetPartitionStateRequest(
            topic_id_partition=topic_id_partition_to_proto(partition)
        )
        response = await self.call_unary(self._stub.GetPartitionState, request, timeout_s=timeout_s)
        state: pb.PartitionState = response.partition_state
        return state

    async def list_offsets(
        self, partition: TopicIdPartition, timestamp: int, *, timeout_s: float | None = None
    ) -> tuple[int | None, int | None]:
        """(offset, leader epoch) for -4 / -5 / -6; None where there is none."""
        request = pb.ListOffsetsRequest(
            topic_id_partition=topic_id_partition_to_proto(partition), timestamp=timestamp
        )
        response = await self.call_unary(self._stub.ListOffsets, request, timeout_s=timeout_s)
        return (
            response.offset if response.HasField("offset") else None,
            response.leader_epoch if response.HasField("leader_epoch") else None,
        )
