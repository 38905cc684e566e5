"""The metadata manager service on a real broker: KIP-405 scenarios, readiness, refusals."""

import dataclasses
import uuid

import grpc
import pytest
from support.services import new_partition
from support.waiting import eventually

from remotelog.api.metadata.v1 import metadata_pb2 as pb
from remotelog.api.metadata.v1 import metadata_pb2_grpc as pb_grpc
from remotelog.api.type.v1 import segment_pb2 as type_pb
from remotelog.core.errors import (
    CustomMetadataSizeLimitExceededError,
    InvalidArgumentError,
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
)
from remotelog.core.model import RemotePartitionDeleteMetadata
from remotelog.core.states import RemoteLogSegmentState
from remotelog.core.states import RemotePartitionDeleteState as D

from .scenarios import (
    COPIED,
    DELETED,
    DELETING,
    SCENARIOS,
    Scenario,
    Seg,
    metadata_of,
    run,
    update_of,
)


class ClientTarget:
    """Scenario target through the gRPC client."""

    def __init__(self, client):
        self.client = client

    async def add(self, metadata):
        await self.client.add_remote_log_segment_metadata(metadata)

    async def update(self, update):
        await self.client.update_remote_log_segment_metadata(update)

    async def lookup(self, tip, epoch, offset):
        return await self.client.remote_log_segment_metadata(tip, epoch, offset)

    async def highest(self, tip, epoch):
        return await self.client.highest_offset_for_epoch(tip, epoch)

    async def list(self, tip, epoch):
        return [m async for m in self.client.list_remote_log_segments(tip, epoch)]

    async def size(self, tip, epoch):
        return await self.client.remote_log_size(tip, epoch)

    async def txn(self, tip, epoch, offset):
        return await self.client.next_segment_with_txn_index(tip, epoch, offset)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name[:40])
async def test_scenario_through_the_service(metadata, scenario: Scenario):
    tip = new_partition()
    await metadata.client.on_partition_leadership_changes([tip])
    assert await run(scenario, tip, ClientTarget(metadata.client)) == scenario.expectations


async def test_writes_are_readable_at_once_and_metadata_round_trips(metadata):
    tip = new_partition()
    segment = metadata_of(tip, Seg("a", 0, 99, {0: 0, 3: 50}, txn_index_empty=False))
    await metadata.client.add_remote_log_segment_metadata(segment)  # first use registers
    update = update_of(segment, COPIED)
    await metadata.client.update_remote_log_segment_metadata(update)
    # Read-your-writes: no wait between the update returning and the read.
    found = await metadata.client.remote_log_segment_metadata(tip, 3, 60)
    assert found == segment.create_with_updates(update)
    assert found.custom_metadata == b"copied"
    assert found.txn_index_empty is False
    assert await metadata.client.is_ready(tip) is True


async def test_unknown_partition_is_not_ready_then_becomes_ready(metadata, broker):
    tip = new_partition()
    stub = pb_grpc.RemoteLogMetadataServiceStub(metadata.client.channel)
    request = pb.GetHighestOffsetForEpochRequest(
        topic_id_partition=type_pb.TopicIdPartition(
            topic_id=tip.topic_id.bytes, topic=tip.topic, partition=tip.partition
        ),
        leader_epoch=0,
    )
    # The first read registers the partition and answers METADATA_NOT_READY.
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.GetHighestOffsetForEpoch(request)
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "METADATA_NOT_READY" in str(raised.value.trailing_metadata())

    async def ready() -> bool:
        is_ready = pb.IsReadyRequest(topic_id_partition=request.topic_id_partition)
        return (await stub.IsReady(is_ready)).ready

    await eventually(ready)
    response = await stub.GetHighestOffsetForEpoch(request)
    assert not response.HasField("offset")


async def test_invalid_transitions_are_refused_and_nothing_is_published(metadata):
    tip = new_partition()
    segment = metadata_of(tip, Seg("a", 0, 99, {0: 0}))
    client = metadata.client
    with pytest.raises(RemoteResourceNotFoundError):
        await client.update_remote_log_segment_metadata(update_of(segment, COPIED))
    await client.add_remote_log_segment_metadata(segment)
    await client.add_remote_log_segment_metadata(segment)  # a retried add is fine
    with pytest.raises(InvalidStateTransitionError, match="COPY_SEGMENT_STARTED can not move"):
        await client.update_remote_log_segment_metadata(update_of(segment, DELETED))
    await client.update_remote_log_segment_metadata(update_of(segment, DELETING))
    with pytest.raises(InvalidStateTransitionError, match="DELETE_SEGMENT_STARTED can not move"):
        await client.update_remote_log_segment_metadata(update_of(segment, COPIED))
    with pytest.raises(InvalidStateTransitionError):
        await client.add_remote_log_segment_metadata(segment)
    with pytest.raises(InvalidArgumentError, match="COPY_SEGMENT_STARTED") as bad:
        await client.update_remote_log_segment_metadata(
            update_of(segment, COPIED).__class__(
                segment.remote_log_segment_id, 1, None, segment.state, 1
            )
        )
    assert bad.value.field == "remote_log_segment_metadata_update.state"
    too_big = update_of(segment, DELETED).__class__(
        segment.remote_log_segment_id, 1, b"x" * 129, DELETED, 1
    )
    with pytest.raises(CustomMetadataSizeLimitExceededError):
        await client.update_remote_log_segment_metadata(too_big)
    listed = [m async for m in client.list_remote_log_segments(tip)]
    assert [m.state for m in listed] == [DELETING]
    # Refused writes were never published: the metadata partition holds 2 adds + 1 update.
    store = metadata.manager.store
    state = store.assigned[store.metadata_partition(tip)].state
    assert len(state.cache(tip)) == 1


async def test_bad_requests_name_the_field(metadata):
    stub = pb_grpc.RemoteLogMetadataServiceStub(metadata.client.channel)
    tip = new_partition()
    good = type_pb.TopicIdPartition(topic_id=tip.topic_id.bytes, topic="orders", partition=0)
    cases = [
        (pb.GetRemoteLogSegmentMetadataRequest(leader_epoch=0, offset=0), "topic_id_partition"),
        (
            pb.GetRemoteLogSegmentMetadataRequest(
                topic_id_partition=good, leader_epoch=-1, offset=0
            ),
            "leader_epoch",
        ),
        (
            pb.GetRemoteLogSegmentMetadataRequest(
                topic_id_partition=good, leader_epoch=0, offset=-5
            ),
            "offset",
        ),
        (
            pb.GetRemoteLogSegmentMetadataRequest(
                topic_id_partition=type_pb.TopicIdPartition(
                    topic_id=tip.topic_id.bytes, topic="../etc", partition=0
                )
            ),
            "topic_id_partition.topic",
        ),
    ]
    for request, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.GetRemoteLogSegmentMetadata(request)
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT, field
        assert field in raised.value.details(), raised.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.AddRemoteLogSegmentMetadata(pb.AddRemoteLogSegmentMetadataRequest())
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "remote_log_segment_metadata" in raised.value.details()


async def test_partition_deletion_drops_the_cache_and_spares_a_recreated_topic(metadata):
    client = metadata.client
    old = new_partition("payments")
    recreated = new_partition("payments")  # same name, new topic id
    for tip in (old, recreated):
        segment = metadata_of(tip, Seg("a", 0, 9, {0: 0}))
        await client.add_remote_log_segment_metadata(segment)
        await client.update_remote_log_segment_metadata(update_of(segment, COPIED))

    def delete(state):
        return RemotePartitionDeleteMetadata(old, state, 1, 0)

    with pytest.raises(InvalidStateTransitionError):
        await client.put_remote_partition_delete_metadata(delete(D.DELETE_PARTITION_STARTED))
    assert await client.remote_partition_delete_state(old) is None
    await client.put_remote_partition_delete_metadata(delete(D.DELETE_PARTITION_MARKED))
    await client.put_remote_partition_delete_metadata(delete(D.DELETE_PARTITION_MARKED))
    assert await client.remote_partition_delete_state(old) is D.DELETE_PARTITION_MARKED
    late_copy = metadata_of(old, Seg("late", 10, 19, {0: 10}))
    with pytest.raises(InvalidStateTransitionError, match="MARKED: no new segments"):
        await client.add_remote_log_segment_metadata(late_copy)
    await client.put_remote_partition_delete_metadata(delete(D.DELETE_PARTITION_STARTED))
    assert await metadata.manager.remote_partition_delete_state(old) is D.DELETE_PARTITION_STARTED
    await client.put_remote_partition_delete_metadata(delete(D.DELETE_PARTITION_FINISHED))
    await client.put_remote_partition_delete_metadata(delete(D.DELETE_PARTITION_FINISHED))
    assert await metadata.manager.remote_partition_delete_state(old) is D.DELETE_PARTITION_FINISHED
    assert await client.remote_partition_delete_state(old) is D.DELETE_PARTITION_FINISHED
    with pytest.raises(RemoteResourceNotFoundError, match="was deleted"):
        await client.highest_offset_for_epoch(old, 0)
    with pytest.raises(InvalidStateTransitionError):
        await client.put_remote_partition_delete_metadata(delete(D.DELETE_PARTITION_MARKED))
    assert await client.highest_offset_for_epoch(recreated, 0) == 9
    assert [m.start_offset async for m in client.list_remote_log_segments(recreated)] == [0]


async def test_stop_partitions_unassigns_and_a_later_read_reloads(metadata):
    client = metadata.client
    tip = new_partition()
    segment = metadata_of(tip, Seg("a", 0, 9, {0: 0}))
    await client.add_remote_log_segment_metadata(segment)
    await client.update_remote_log_segment_metadata(update_of(segment, COPIED))
    await client.on_stop_partitions([tip])
    assert tip not in metadata.manager.registered_partitions()
    # Served again from the topic (the client retries METADATA_NOT_READY); a read
    # registers nothing (reads of arbitrary partitions must not grow the manager).
    assert await client.highest_offset_for_epoch(tip, 0) == 9
    assert tip not in metadata.manager.registered_partitions()


async def test_wrong_partition_count_is_refused(tmp_path, broker):
    from support.services import metadata_config

    from remotelog.metadata.startup import open_metadata_manager

    topic = f"__remote_log_metadata_{uuid.uuid4().hex[:8]}"
    first = await open_metadata_manager(
        metadata_config(tmp_path, broker.bootstrap_servers, "first"), topic=topic
    )
    await first.close()
    config = metadata_config(
        tmp_path,
        broker.bootstrap_servers,
        "second",
        **{"remote.log.metadata.topic.num.partitions": "7"},
    )
    with pytest.raises(InvalidArgumentError) as refused:
        await open_metadata_manager(config, topic=topic)
    assert refused.value.field == "remote.log.metadata.topic.num.partitions"
    assert "has 5 partitions" in str(refused.value)


def finished(tip, name: str, start: int, **changes):
    segment = metadata_of(tip, Seg(name, start, start + 9, size=100, epochs=((0, start),)))
    return dataclasses.replace(segment, **{"state": COPIED, **changes})


async def test_recovery_refuses_bad_segments_whole_and_writes_nothing(metadata):
    client = metadata.client
    tip, other = new_partition("recovered"), new_partition("elsewhere")
    good = finished(tip, "good", 0)
    refusals = [
        ([good, finished(other, "other", 10)], "remote_log_segment_metadata", "is not of"),
        (
            [good, finished(tip, "started", 10, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)],
            "remote_log_segment_metadata.state",
            "is COPY_SEGMENT_FINISHED, not COPY_SEGMENT_STARTED",
        ),
        (
            [good, finished(tip, "big", 10, custom_metadata=b"x" * 129)],
            "custom_metadata",
            "129 bytes exceed the maximum of 128",
        ),
    ]
    for segments, field, why in refusals:
        with pytest.raises(InvalidArgumentError) as refused:
            await client.recover_remote_log_segments(tip, segments, recovery="a test")
        assert refused.value.field == field
        assert why in str(refused.value)
    with pytest.raises(InvalidArgumentError) as unnamed:
        await client.recover_remote_log_segments(tip, [good], recovery=" ")
    assert unnamed.value.field == "recovery"
    assert [m async for m in client.list_remote_log_segments(tip)] == []
