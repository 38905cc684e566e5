"""ListRemotePartitions: which partitions a reader of the remote tier finds, by topic name."""

import uuid

from support.services import PARTITIONS, metadata_config, new_partition, start_metadata

from remotelog.core.model import RemotePartitionDeleteMetadata, RemotePartitionSummary
from remotelog.core.states import RemotePartitionDeleteState as D

from .scenarios import COPIED, DELETED, DELETING, Seg, metadata_of, update_of


async def tier(client, tip, *segments: Seg, state=COPIED):
    for seg in segments:
        metadata = metadata_of(tip, seg)
        await client.add_remote_log_segment_metadata(metadata)
        if state is not None:
            await client.update_remote_log_segment_metadata(update_of(metadata, state))


async def test_partitions_with_finished_segments_are_listed_by_topic_and_partition(
    metadata, tmp_path, broker
):
    client = metadata.client
    orders, clicks = f"orders-{uuid.uuid4().hex[:6]}", f"clicks-{uuid.uuid4().hex[:6]}"
    orders_1, orders_0 = new_partition(orders, 1), new_partition(orders, 0)
    clicks_0 = new_partition(clicks, 0)
    copying = new_partition(orders, 2)  # nothing finished yet
    deleted = new_partition(orders, 3)  # its topic is being deleted
    await tier(client, orders_0, Seg("a", 0, 99, {0: 0}, size=700), Seg("b", 100, 249, {0: 0}))
    await tier(client, orders_1, Seg("a", 40, 59, {0: 40}, size=20))
    await tier(client, orders_1, Seg("b", 60, 79, {0: 60}, size=20), state=None)
    await tier(client, clicks_0, Seg("a", 5, 9, {1: 5}, size=5))
    await tier(client, copying, Seg("a", 0, 9, {0: 0}), state=None)
    await tier(client, deleted, Seg("a", 0, 9, {0: 0}))
    await client.put_remote_partition_delete_metadata(
        RemotePartitionDeleteMetadata(deleted, D.DELETE_PARTITION_MARKED, 1, 0)
    )
    # A segment retention deleted no longer counts.
    gone = metadata_of(orders_0, Seg("b", 100, 249, {0: 0}))
    before = await client.list_remote_partitions(orders)
    await client.update_remote_log_segment_metadata(update_of(gone, DELETING))
    await client.update_remote_log_segment_metadata(update_of(gone, DELETED))

    assert before[0] == RemotePartitionSummary(orders_0, 0, 249, 1700, 2)
    expected_orders = [
        RemotePartitionSummary(orders_0, 0, 99, 700, 1),
        RemotePartitionSummary(orders_1, 40, 59, 20, 1),
    ]
    assert await client.list_remote_partitions(orders) == expected_orders
    assert await client.list_remote_partitions(clicks) == [
        RemotePartitionSummary(clicks_0, 5, 9, 5, 1)
    ]
    assert await client.list_remote_partitions("no-such-topic") == []
    everything = await client.list_remote_partitions()
    mine = [p for p in everything if p.topic_id_partition.topic in (orders, clicks)]
    assert mine == [RemotePartitionSummary(clicks_0, 5, 9, 5, 1), *expected_orders]
    ordered = [(p.topic_id_partition.topic, p.topic_id_partition.partition) for p in everything]
    assert ordered == sorted(ordered)

    # Another instance that never saw these partitions finds them in the topic.
    other = await start_metadata(metadata_config(tmp_path, broker.bootstrap_servers, "other"))
    try:
        assert await other.client.list_remote_partitions(orders) == expected_orders
        # Stopping a partition it serves does not unassign what the listing needs.
        await other.client.on_partition_leadership_changes([orders_0])
        await other.client.on_stop_partitions([orders_0])
        assert sorted(other.manager.store.assigned) == list(range(PARTITIONS))
        assert all(a.caught_up for a in other.manager.store.assigned.values())
    finally:
        await other.stop()
