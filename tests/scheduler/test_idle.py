"""Idle partitions: expiration runs plan from a kept listing, and it never deletes on its own."""

import time
import uuid

from support.services import new_partition
from support.waiting import eventually

from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
)
from remotelog.core.states import RemoteLogSegmentState
from remotelog.scheduler import retention
from remotelog.scheduler.scheduler import Kind

from .conftest import FINISHED, Broker

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
DAY_MS = 86_400_000


def count_listings(running) -> list[object]:
    """Record the scheduler's full listings (not the per-epoch ones) on its real metadata client."""
    client = running.scheduler.ctx.metadata
    listings: list[object] = []
    real = client.list_remote_log_segments

    def listing(tip, leader_epoch=None, **kwargs):
        if leader_epoch is None:
            listings.append(tip)
        return real(tip, leader_epoch, **kwargs)

    client.list_remote_log_segments = listing
    return listings


def segment(tip, start: int, end: int, *, max_timestamp_ms: int, event_ms: int):
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        start,
        end,
        max_timestamp_ms,
        9,
        event_ms,
        1000,
        ((0, start),),
    )


async def expiration_runs(running, count: int) -> None:
    target = running.scheduler.runs[Kind.EXPIRATION] + count
    await eventually(lambda: running.scheduler.runs[Kind.EXPIRATION] >= target)


async def segment_state(stack, tip, segment_id):
    return {s.remote_log_segment_id: s.state for s in await stack.segments(tip)}.get(segment_id)


async def test_an_idle_partition_is_listed_once_per_listing_lifetime_and_still_expires(
    fs_stack, tmp_path
):
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.produce(2)  # an active segment only: nothing to copy, nothing tiered
    scheduler = await fs_stack.start_scheduler()
    listings = count_listings(scheduler)
    await scheduler.client.on_partition_leadership_changes([broker.assignment(retention_ms=DAY_MS)])
    await eventually(lambda: listings)
    await expiration_runs(scheduler, 3 * retention.LISTING_MAX_USES)
    # Listed again after LISTING_MAX_USES runs, not every run (each run is 100 ms apart).
    assert 3 <= len(listings) <= 5

    # Another writer (here: the test) tiers a segment that is already past retention.
    now = int(time.time() * 1000)
    expired = segment(tip, 0, 9, max_timestamp_ms=now - 2 * DAY_MS, event_ms=now)
    await fs_stack.metadata.client.add_remote_log_segment_metadata(expired)
    await fs_stack.metadata.client.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(expired.remote_log_segment_id, now, None, FINISHED, 9)
    )
    assert [s.state for s in await fs_stack.segments(tip)] == [FINISHED]

    # Seen at the next listing at the latest, and deleted by retention (DELETE_SEGMENT_FINISHED
    # segments leave the listing, as in Kafka's metadata cache).
    async def gone():
        return await fs_stack.segments(tip) == []

    await eventually(gone, timeout_s=20)
    assert (await scheduler.client.partition_state(tip)).log_start_offset == 10


async def test_a_kept_listing_never_deletes_what_another_writer_changed(
    fs_stack, tmp_path, monkeypatch
):
    # The listing is kept for good here: only a planned deletion may list again.
    monkeypatch.setattr(retention, "LISTING_MAX_USES", 10**6)
    tip = new_partition()
    broker = Broker(tmp_path / "broker-0", tip)
    broker.produce(2)
    grace_ms = 1500
    scheduler = await fs_stack.start_scheduler(
        **{"remote.log.manager.dangling.segment.grace.ms": str(grace_ms)}
    )
    listings = count_listings(scheduler)
    # Another instance starts a copy (inside the grace) ...
    now = int(time.time() * 1000)
    copying = segment(tip, 0, 9, max_timestamp_ms=now, event_ms=now)
    await fs_stack.metadata.client.on_partition_leadership_changes([tip])
    await fs_stack.metadata.client.add_remote_log_segment_metadata(copying)
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])
    await eventually(lambda: listings)  # this scheduler has seen it STARTED
    # ... and finishes it, unseen by this scheduler's kept listing.
    await fs_stack.metadata.client.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(copying.remote_log_segment_id, now, None, FINISHED, 9)
    )
    assert len(listings) == 1

    # Past the grace, the kept listing calls the copy dangling; the scheduler lists
    # again before deleting anything, and keeps the finished segment.
    while time.time() * 1000 < now + grace_ms:
        await expiration_runs(scheduler, 1)
    await eventually(lambda: len(listings) >= 2)
    await expiration_runs(scheduler, 5)
    assert await segment_state(fs_stack, tip, copying.remote_log_segment_id) is FINISHED
    assert len(listings) == 2  # the new listing is kept in turn
