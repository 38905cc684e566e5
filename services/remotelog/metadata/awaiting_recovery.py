"""The partitions whose tiered segments the metadata topic lost, until `remotelog
recover` writes them back.

A manager that starts on a new incarnation of `__remote_log_metadata` (its snapshot is
of another topic id) while its snapshot held segments knows those segments are in the
bucket but no longer in the topic. Answered "ready, no segments", Kafka's next leader
of such a partition would move its log start offset past the whole tiered history, for
good. So those partitions are held not ready, and the set is kept in the snapshot
directory (`awaiting-recovery.json`), so a restart before the recovery holds them too.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from remotelog.core.model import TopicIdPartition
from remotelog.metadata.partition_state import MetadataPartitionState

FILE_NAME = "awaiting-recovery.json"


def lost_partitions(states: Iterable[MetadataPartitionState]) -> set[TopicIdPartition]:
    """The user partitions with live segments in these (discarded) states."""
    return {tip for state in states for tip, cache in state.caches.items() if len(cache)}


def load(directory: Path) -> set[TopicIdPartition]:
    try:
        listed = json.loads((directory / FILE_NAME).read_text())
    except FileNotFoundError:
        return set()
    return {
        TopicIdPartition(uuid.UUID(p["topic_id"]), p["topic"], int(p["partition"]))
        for p in listed["partitions"]
    }


def write(directory: Path, partitions: Iterable[TopicIdPartition]) -> None:
    """The set, written atomically; no file when it is empty."""
    path = directory / FILE_NAME
    listed = sorted(partitions, key=lambda p: (p.topic, p.partition, str(p.topic_id)))
    if not listed:
        path.unlink(missing_ok=True)
        return
    body = {
        "partitions": [
            {"topic_id": str(p.topic_id), "topic": p.topic, "partition": p.partition}
            for p in listed
        ]
    }
    directory.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    with temporary.open("w") as out:
        json.dump(body, out, indent=1)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
