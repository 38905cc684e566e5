"""Reads of arbitrary partitions assign the metadata partitions that hold them but register
nothing: 100,000 reads of random partitions leave the manager's state flat."""

import gc
import random
import uuid

from support.services import PARTITIONS
from support.waiting import eventually

from remotelog.core.model import TopicIdPartition


def random_partition() -> TopicIdPartition:
    return TopicIdPartition(uuid.uuid4(), "ghost", random.randrange(10_000))


async def read_random(manager, count: int) -> int:
    """Reads of `count` random partitions; how many found any segment."""
    found = 0
    for _ in range(count):
        tip = random_partition()
        found += bool(manager.remote_log_segments(tip))
        assert await manager.remote_log_segment_metadata(tip, 0, 0) is None
    return found


async def test_reads_of_random_partitions_leave_the_managers_state_flat(metadata):
    manager = metadata.manager
    registered = manager.registered_partitions()
    # Every metadata partition a random partition can land on, assigned and caught up.
    tips = [random_partition() for _ in range(20 * PARTITIONS)]
    await eventually(lambda: all(manager.store.is_ready(tip) for tip in tips))

    assert await read_random(manager, 10_000) == 0  # warm: caches, histograms, interning
    gc.collect()
    warm = len(gc.get_objects())
    assert await read_random(manager, 100_000) == 0
    gc.collect()
    # Each partition kept would be an object at least: 100,000 of them would show.
    assert len(gc.get_objects()) - warm < 1_000
    assert manager.registered_partitions() == registered
