"""A fetch's leader epoch against the lineage the remote tier implies: Kafka's answers;
and which views are kept."""

import asyncio
import uuid

import pytest

from remotelog.core.errors import (
    FencedLeaderEpochError,
    MetadataNotReadyError,
    UnknownLeaderEpochError,
)
from remotelog.core.model import TopicIdPartition
from remotelog.fetch.remote_tier import RemoteTierView, RemoteTierViews

TIP = TopicIdPartition(uuid.UUID(int=7), "orders", 0)


def view(lineage: tuple[tuple[int, int], ...]) -> RemoteTierView:
    return RemoteTierView(TIP, lineage, ())


@pytest.mark.parametrize(
    ("leader_epoch", "offset"),
    [(3, 100), (3, 199), (5, 200), (5, 10_000), (1, 50)],  # 1: older than the lineage's first
)
def test_an_epoch_that_holds_the_offset_is_accepted(leader_epoch, offset):
    view(((3, 100), (5, 200))).check_leader_epoch(leader_epoch, offset)


def test_an_epoch_newer_than_any_tiered_is_unknown():
    with pytest.raises(UnknownLeaderEpochError) as raised:
        view(((3, 100), (5, 200))).check_leader_epoch(6, 250)
    assert raised.value.message == (
        f"leader epoch 6 of {TIP} is newer than the latest epoch in the remote tier (5)"
    )
    assert raised.value.metadata == {"partition": str(TIP), "leader_epoch": "6"}


def test_an_epoch_that_ended_before_the_offset_is_fenced():
    with pytest.raises(FencedLeaderEpochError) as raised:
        view(((3, 100), (5, 200))).check_leader_epoch(3, 200)
    assert raised.value.message == (
        f"leader epoch 3 of {TIP} ended before offset 200: epoch 5 begins at 200"
    )


def test_a_partition_without_remote_data_leaves_the_answer_to_the_lookup():
    view(()).check_leader_epoch(9, 0)
    assert not view(()).newer_than_lineage(9)
    assert view(((0, 0),)).newer_than_lineage(1)


async def test_views_of_partitions_without_remote_data_are_not_kept():
    listed: list[TopicIdPartition] = []

    async def list_segments(tip: TopicIdPartition, timeout_s: float | None) -> list:
        listed.append(tip)
        return []

    views = RemoteTierViews(list_segments, ttl_ms=60_000)
    ghosts = [TopicIdPartition(uuid.uuid4(), "ghost", n) for n in range(1_000)]
    for ghost in ghosts:
        assert (await views.get(ghost)).segments == ()
    assert len(views) == 0
    await views.get(ghosts[0])  # listed again: nothing was kept to answer from
    assert listed == [*ghosts, ghosts[0]]


async def test_a_listing_that_fails_after_every_reader_gave_up_reports_nothing():
    # Every Fetch waiting on a shared listing can expire in the purgatory (cancelled)
    # before the listing fails, e.g. METADATA_NOT_READY while the metadata manager
    # restarts. The failure then reaches nobody, and must not be logged by asyncio as
    # "Task exception was never retrieved" (the autouse loop_reports_nothing fails this
    # test if it is).
    release = asyncio.Event()

    async def list_segments(tip: TopicIdPartition, timeout_s: float | None) -> list:
        await release.wait()
        raise MetadataNotReadyError("metadata of the partition is loading")

    views = RemoteTierViews(list_segments, ttl_ms=60_000)
    tip = TopicIdPartition(uuid.uuid4(), "orders", 0)
    readers = [asyncio.create_task(views.get(tip)) for _ in range(3)]
    await asyncio.sleep(0)
    for reader in readers:
        reader.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    release.set()
    for _ in range(3):
        await asyncio.sleep(0)
    # The next reader lists anew and gets the error itself.
    with pytest.raises(MetadataNotReadyError):
        await views.get(tip)
