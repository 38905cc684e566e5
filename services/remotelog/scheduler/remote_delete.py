"""Deletion of one remote segment, as RemoteLogManager.deleteRemoteLogSegment does it.

DELETE_SEGMENT_STARTED is published first, so a crash in between leaves a
segment that expiration finds and deletes again (the store's delete is
idempotent); DELETE_SEGMENT_FINISHED only after the objects are gone.
"""

from __future__ import annotations

from remotelog.core.errors import RemoteLogError
from remotelog.core.model import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate
from remotelog.core.states import RemoteLogSegmentState
from remotelog.scheduler import metrics
from remotelog.scheduler.partition import TaskContext


async def _publish(
    ctx: TaskContext, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> None:
    update = RemoteLogSegmentMetadataUpdate(
        metadata.remote_log_segment_id,
        ctx.now_ms(),
        metadata.custom_metadata,
        state,
        ctx.config.broker_id,
    )
    await ctx.metadata.update_remote_log_segment_metadata(update, timeout_s=ctx.timeout_s)


async def delete_remote_segment(ctx: TaskContext, metadata: RemoteLogSegmentMetadata) -> None:
    topic = {"topic": metadata.topic_id_partition.topic}
    if metadata.state is not RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
        await _publish(ctx, metadata, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    metrics.DELETE_REQUESTS.add(1, topic)
    try:
        await ctx.store.delete_log_segment_data(metadata, timeout_s=ctx.timeout_s)
    except RemoteLogError:
        metrics.DELETE_ERRORS.add(1, topic)
        raise
    await _publish(ctx, metadata, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
