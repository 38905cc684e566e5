"""The scheduler's segment deletions, counted under its own metrics."""

from __future__ import annotations

from remotelog.core.model import RemoteLogSegmentMetadata
from remotelog.core.remote_delete import RemoteSegmentDeleter
from remotelog.scheduler.partition import TaskContext


async def delete_remote_segment(ctx: TaskContext, metadata: RemoteLogSegmentMetadata) -> None:
    deleter = RemoteSegmentDeleter(
        ctx.store,
        ctx.metadata,
        ctx.config.broker_id,
        ctx.timeout_s,
        ctx.metrics,
        ctx.clock,
    )
    await deleter.delete(metadata)
