"""What one partition of `__remote_log_metadata` says: every user partition it carries.

Kafka's RemotePartitionMetadataStore, per metadata-topic partition. Every user
partition found in an assigned metadata partition is materialised, not only
the ones registered: a partition registered later is then ready at once, and
the snapshot is simply this state plus `next_offset`.
"""

from __future__ import annotations

import logging

from remotelog.core.errors import RemoteResourceNotFoundError
from remotelog.core.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from remotelog.core.states import RemotePartitionDeleteState, is_valid_partition_delete_transition
from remotelog.metadata.cache import RemoteLogMetadataCache

log = logging.getLogger(__name__)


class MetadataPartitionState:
    """The materialised state of one metadata-topic partition up to `next_offset`."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        # The offset of the next record to apply (everything below is applied).
        self.next_offset = 0
        self.caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self.deletes: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}
        # Partitions whose deletion finished: their cache is dropped and late
        # events for them are ignored (a topic id is never reused).
        self.deleted: set[TopicIdPartition] = set()

    def segment_count(self) -> int:
        return sum(len(cache) for cache in self.caches.values())

    def cache(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache | None:
        return self.caches.get(topic_id_partition)

    def knows(self, segment: RemoteLogSegmentId) -> bool:
        cache = self.caches.get(segment.topic_id_partition)
        return cache is not None and segment.id.bytes in cache.segments

    def _cache_for_write(self, topic_id_partition: TopicIdPartition) -> RemoteLogMetadataCache:
        cache = self.caches.get(topic_id_partition)
        if cache is None:
            cache = self.caches[topic_id_partition] = RemoteLogMetadataCache(topic_id_partition)
        return cache

    def apply(self, offset: int, event: RemoteLogMetadata) -> str | None:
        """Apply the record at `offset`; returns why it was dropped, or None when applied."""
        self.next_offset = offset + 1
        if isinstance(event, RemotePartitionDeleteMetadata):
            return self._apply_partition_delete(event)
        if not isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
            return f"{type(event).__name__} records do not belong on the metadata topic"
        tip = event.remote_log_segment_id.topic_id_partition
        if tip in self.deleted:
            return f"partition {tip} was deleted"
        cache = self._cache_for_write(tip)
        if isinstance(event, RemoteLogSegmentMetadata):
            return cache.add_copy_in_progress_segment(event)
        try:
            return cache.update_remote_log_segment_metadata(event)
        except RemoteResourceNotFoundError as exc:
            return exc.message

    def _apply_partition_delete(self, event: RemotePartitionDeleteMetadata) -> str | None:
        tip = event.topic_id_partition
        if tip in self.deleted:
            return f"partition {tip} was deleted"
        current = self.deletes.get(tip)
        source = None if current is None else current.state
        if not is_valid_partition_delete_transition(source, event.state):
            return f"{source.name if source else 'no state'} can not move to {event.state.name}"
        if event.state is RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            self.caches.pop(tip, None)
            self.deletes.pop(tip, None)
            self.deleted.add(tip)
        else:
            self.deletes[tip] = event
        return None
