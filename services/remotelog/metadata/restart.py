"""What a metadata manager takes over from its last run: the snapshot, if it is of the
topic as it is now, and the partitions whose segments a lost topic held."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from remotelog.core.model import TopicIdPartition
from remotelog.metadata import awaiting_recovery
from remotelog.metadata import snapshot as snapshots
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.partition_state import MetadataPartitionState
from remotelog.metadata.topic import TopicInfo

log = logging.getLogger("remotelog.metadata.manager")


@dataclass(frozen=True)
class LoadedSnapshot:
    """What a start takes from the snapshot: states by metadata partition, the registered
    partitions, and how it went ("none", "loaded", "discarded: <why>")."""

    states: dict[int, MetadataPartitionState] = field(default_factory=dict)
    registered: frozenset[TopicIdPartition] = frozenset()
    status: str = "none"
    # Partitions with segments in a snapshot of another topic id: the topic lost them.
    lost: frozenset[TopicIdPartition] = frozenset()


def load_snapshot(config: MetadataManagerConfig, topic: TopicInfo, name: str) -> LoadedSnapshot:
    """The snapshot in `remote.log.metadata.snapshot.dir`, if it is of this topic as it is
    now; one that is not is discarded, and the topic replayed from the beginning."""
    directory = Path(config.snapshot_dir).expanduser()

    def discard(why: str) -> LoadedSnapshot:
        log.warning("discarding metadata snapshot in %s: %s; replaying %s", directory, why, name)
        return LoadedSnapshot(status=f"discarded: {why}")

    try:
        loaded = snapshots.load(directory)
    except snapshots.SnapshotError as exc:
        return discard(str(exc))
    if loaded is None:
        return LoadedSnapshot()
    if loaded.topic_id != topic.topic_id:
        discarded = discard(
            f"it is of topic id {loaded.topic_id}, the topic now has {topic.topic_id} "
            "(deleted and recreated)"
        )
        lost = awaiting_recovery.lost_partitions(loaded.states.values())
        return replace(discarded, lost=frozenset(lost))
    if loaded.num_partitions != topic.partitions:
        return discard(
            f"it has {loaded.num_partitions} metadata partitions, the topic {topic.partitions}"
        )
    log.info(
        "loaded metadata snapshot: %d metadata partitions, %d segments",
        len(loaded.states),
        sum(state.segment_count() for state in loaded.states.values()),
    )
    return LoadedSnapshot(dict(loaded.states), loaded.registered, "loaded")
