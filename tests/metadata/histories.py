"""Histories of segments written through a manager, and everything it answers of them."""

import random
import uuid

from support.services import new_partition
from support.waiting import eventually

from remotelog.core.model import TopicIdPartition

from .scenarios import COPIED, DELETED, DELETING, Seg, metadata_of, update_of


def partitions(count: int) -> list[TopicIdPartition]:
    return [new_partition("events", p) for p in range(count)]


async def until_ready(manager, tips) -> None:
    """Register `tips` and wait until they are ready (registration by a snapshot counts too)."""
    await manager.on_partition_leadership_changes(tips, [])
    await eventually(
        lambda: all(manager.store.is_ready(tip) for tip in manager.registered_partitions()),
        interval_s=0.01,
    )


async def answers(manager, tips) -> dict:
    """Everything the manager says about `tips`: listings, lookups, highest offsets, sizes."""
    result = {}
    for tip in tips:
        result[tip, "all"] = manager.remote_log_segments(tip)
        for epoch in range(4):
            result[tip, "list", epoch] = manager.remote_log_segments(tip, epoch)
            result[tip, "highest", epoch] = await manager.highest_offset_for_epoch(tip, epoch)
            result[tip, "size", epoch] = await manager.remote_log_size(tip, epoch)
            for offset in range(0, 2000, 37):
                found = await manager.remote_log_segment_metadata(tip, epoch, offset)
                result[tip, epoch, offset] = found
    return result


async def write_history(manager, tip, rng: random.Random, segments: int, salt: str) -> int:
    """Copy `segments` segments across leader epochs, delete some; returns events written."""
    events = 0
    offset = 0
    for number in range(segments):
        epoch = number // 4
        seg = Seg(f"{salt}{number}", offset, offset + rng.randint(5, 40), {epoch: offset})
        metadata = metadata_of(tip, seg)
        await manager.add_remote_log_segment_metadata(metadata)
        await manager.update_remote_log_segment_metadata(update_of(metadata, COPIED))
        events += 2
        if rng.random() < 0.3:
            await manager.update_remote_log_segment_metadata(update_of(metadata, DELETING))
            events += 1
            if rng.random() < 0.5:
                await manager.update_remote_log_segment_metadata(update_of(metadata, DELETED))
                events += 1
        offset = seg.end + 1
    return events


def fresh_topic() -> str:
    return f"__remote_log_metadata_{uuid.uuid4().hex[:8]}"
