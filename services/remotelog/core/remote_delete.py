"""Deletion of one remote segment, as RemoteLogManager.deleteRemoteLogSegment does it.

DELETE_SEGMENT_STARTED is published first, so a crash in between leaves a
segment that expiration or the partition remover finds and deletes again (the
store's delete is idempotent); DELETE_SEGMENT_FINISHED only after the objects
are gone. The copy scheduler and the partition remover both delete this way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from remotelog.core.errors import RemoteLogError
from remotelog.core.metrics import REMOTE_DELETE_ERRORS, REMOTE_DELETE_REQUESTS, Instruments
from remotelog.core.model import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate
from remotelog.core.ports import SegmentDataDeleter, SegmentStateWriter
from remotelog.core.states import RemoteLogSegmentState


@dataclass(frozen=True)
class RemoteSegmentDeleter:
    store: SegmentDataDeleter
    metadata: SegmentStateWriter
    broker_id: int
    timeout_s: float
    metrics: Instruments  # of the service that deletes
    clock: Callable[[], float] = time.time

    async def _publish(
        self, segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
    ) -> None:
        update = RemoteLogSegmentMetadataUpdate(
            segment.remote_log_segment_id,
            int(self.clock() * 1000),
            segment.custom_metadata,
            state,
            self.broker_id,
        )
        await self.metadata.update_remote_log_segment_metadata(update, timeout_s=self.timeout_s)

    async def delete(self, segment: RemoteLogSegmentMetadata) -> None:
        topic = {"topic": segment.topic_id_partition.topic}
        if segment.state is not RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            await self._publish(segment, RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
        self.metrics.add(REMOTE_DELETE_REQUESTS, 1, topic)
        try:
            await self.store.delete_log_segment_data(segment, timeout_s=self.timeout_s)
        except RemoteLogError:
            self.metrics.add(REMOTE_DELETE_ERRORS, 1, topic)
            raise
        await self._publish(segment, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
