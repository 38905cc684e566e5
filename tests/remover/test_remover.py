"""The partition remover against Apache Kafka, the real S3-backed store and metadata manager."""

import asyncio
import logging
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2
from support.services import new_partition
from support.serving import serve_until_sigterm
from support.telemetry import counter, metric_points
from support.waiting import eventually

from remotelog.api.remover.v1 import partition_remover_pb2 as pb
from remotelog.api.remover.v1 import partition_remover_pb2_grpc as pb_grpc
from remotelog.client import PartitionRemoverClient
from remotelog.core import metrics as m
from remotelog.core.errors import RemoteResourceNotFoundError, UnknownTopicOrPartitionError
from remotelog.core.model import RemotePartitionDeleteMetadata, TopicIdPartition
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.rpc.serve import serve_command

from .conftest import CLIENT_OPTIONS, events_of, lifecycle, publish_raw

D = RemotePartitionDeleteState


async def pending_among(client, tips) -> list:
    """Pending deletions of `tips` only: the session broker's metadata topic holds other
    tests' partitions too, and a remover may still be finishing one of theirs."""
    wanted = set(tips)
    return [p for p in await client.pending_deletions() if p.topic_id_partition in wanted]


async def finished(remover, tip):
    status = await remover.client.deletion_status(tip)
    return status if status.state is D.DELETE_PARTITION_FINISHED else None


def expected_lifecycle(segments):
    """Kafka's order: the copies, the marker, then each segment deleted, then FINISHED."""
    copies = []
    deletes = []
    for s in segments:
        copies += [f"COPY_SEGMENT_STARTED@{s.remote_log_segment_id.id}"]
        copies += [f"COPY_SEGMENT_FINISHED@{s.remote_log_segment_id.id}"]
        deletes += [f"DELETE_SEGMENT_STARTED@{s.remote_log_segment_id.id}"]
        deletes += [f"DELETE_SEGMENT_FINISHED@{s.remote_log_segment_id.id}"]
    marked = ["DELETE_PARTITION_MARKED", "DELETE_PARTITION_STARTED"]
    return [*copies, *marked, *deletes, "DELETE_PARTITION_FINISHED"]


async def test_deleting_a_topic_empties_its_prefix_and_spares_a_recreated_topic(
    stack, telemetry, caplog
):
    """Kafka's DeleteTopicTest: two partitions of two tiered segments each."""
    caplog.set_level(logging.INFO, logger="remotelog")
    reader, _ = telemetry
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    deleted = [TopicIdPartition(old_id, topic, p) for p in (0, 1)]
    recreated = TopicIdPartition(new_id, topic, 0)
    tiered = {tip: await stack.tier(tip, 2) for tip in [*deleted, recreated]}
    assert all(len(stack.objects_of(tip)) == 6 for tip in tiered)
    remover = await stack.start_remover()

    await remover.client.mark_partitions_for_deletion(deleted, broker_id=3)

    for tip in deleted:
        status = await eventually(lambda tip=tip: finished(remover, tip))
        assert status.segments_remaining == 0
        assert status.last_error_reason == ""
        assert stack.objects_of(tip) == {}
        assert f"deleted partition {tip}: 2 remote segments" in caplog.messages
        assert lifecycle(events_of(stack.bootstrap, tip)) == expected_lifecycle(tiered[tip])
        # The metadata manager dropped the partition's cache.
        with pytest.raises(RemoteResourceNotFoundError, match="was deleted"):
            await stack.segments(tip)
    assert await pending_among(remover.client, deleted) == []
    # Same name, new topic id: untouched.
    assert len(stack.objects_of(recreated)) == 6
    assert [s.remote_log_segment_id for s in await stack.segments(recreated)] == [
        s.remote_log_segment_id for s in tiered[recreated]
    ]
    assert counter(reader, m.REMOTE_DELETE_REQUESTS.name, topic, "remotelog.remover") == 4
    assert counter(reader, m.REMOTE_DELETE_ERRORS.name, topic, "remotelog.remover") == 0
    # Progress is committed past the FINISHED events once the run ends.
    for tip in deleted:
        last = events_of(stack.bootstrap, tip)[-1][0]
        await eventually(lambda tip=tip, last=last: stack.committed(tip) > last)


async def test_a_duplicate_marker_is_processed_once(stack):
    tip = new_partition("payments")
    segments = await stack.tier(tip, 2)
    remover = await stack.start_remover()
    await remover.client.mark_partitions_for_deletion([tip])
    await remover.client.mark_partitions_for_deletion([tip])  # a controller failover repeats it
    await eventually(lambda: finished(remover, tip))
    # Marking a finished partition again is harmless and publishes nothing.
    await remover.client.mark_partitions_for_deletion([tip])
    await stack.stop_service(remover)

    # A failed-over controller that did not look first publishes a raw duplicate marker.
    before = events_of(stack.bootstrap, tip)
    publish_raw(
        stack.bootstrap, RemotePartitionDeleteMetadata(tip, D.DELETE_PARTITION_MARKED, 1, 0)
    )
    after = events_of(stack.bootstrap, tip)
    assert lifecycle(after) == [*lifecycle(before), "DELETE_PARTITION_MARKED"]

    # A restarted remover reads the duplicate from its committed progress and does nothing.
    restarted = await stack.start_remover("restarted")
    await eventually(lambda: stack.committed(tip) > after[-1][0])
    assert lifecycle(events_of(stack.bootstrap, tip)) == lifecycle(after)
    names = lifecycle(after)
    assert names.count("DELETE_PARTITION_STARTED") == 1
    assert names.count("DELETE_PARTITION_FINISHED") == 1
    assert len([n for n in names if n.startswith("DELETE_SEGMENT_FINISHED")]) == len(segments)
    assert (await restarted.client.deletion_status(tip)).state is D.DELETE_PARTITION_FINISHED
    assert await pending_among(restarted.client, [tip]) == []


async def test_a_store_outage_is_retried_without_committing_past_the_marker(
    stack, telemetry, s3_faults
):
    reader, _ = telemetry
    topic = f"outage-{uuid.uuid4().hex[:6]}"
    tip = new_partition(topic)
    segments = await stack.tier(tip, 2)
    remover = await stack.start_remover(**{"remote.partition.remover.rpc.timeout.ms": "1000"})
    s3_faults("503", 100_000, "DELETE")  # down until cleared
    try:
        await remover.client.mark_partitions_for_deletion([tip])
        await eventually(
            lambda: counter(reader, m.REMOTE_DELETE_ERRORS.name, topic, "remotelog.remover") >= 2
        )
        status = await remover.client.deletion_status(tip)
        assert status.state is D.DELETE_PARTITION_STARTED
        assert status.segments_remaining == 2
        assert status.last_error_reason == "REMOTE_STORAGE_UNAVAILABLE"
        marker = [o for o, e in events_of(stack.bootstrap, tip) if "MARKED" in str(e.state)]
        assert stack.committed(tip) <= marker[0]
    finally:
        s3_faults(None)
    await eventually(lambda: finished(remover, tip))
    assert stack.objects_of(tip) == {}
    names = lifecycle(events_of(stack.bootstrap, tip))
    for s in segments:
        assert names.count(f"DELETE_SEGMENT_FINISHED@{s.remote_log_segment_id.id}") == 1
    assert names.count("DELETE_PARTITION_FINISHED") == 1
    assert (await remover.client.deletion_status(tip)).last_error_reason == ""


async def test_status_and_marking_errors_name_the_problem(stack):
    remover = await stack.start_remover()
    never = new_partition("never")
    with pytest.raises(UnknownTopicOrPartitionError, match="never marked"):
        await remover.client.deletion_status(never)
    stub = pb_grpc.PartitionRemoverServiceStub(remover.client.channel)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.MarkPartitionsForDeletion(pb.MarkPartitionsForDeletionRequest())
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "partitions" in raised.value.details()
    bad = pb.MarkPartitionsForDeletionRequest()
    bad.partitions.add(topic="../escape", partition=0, topic_id=uuid.uuid4().bytes)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.MarkPartitionsForDeletion(bad)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "partitions[0].topic" in raised.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.GetDeletionStatus(pb.GetDeletionStatusRequest())
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "topic_id_partition" in raised.value.details()


async def test_a_remover_killed_midway_is_finished_by_another_instance(stack, redis_url, s3_faults):
    tip = new_partition("killed")
    segments = await stack.tier(tip, 4)
    redis = {"redis.url": redis_url}
    stack.config("first", **redis)
    command = serve_command("partition-remover", stack.tmp / "first.properties")
    first = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.PIPE)
    try:
        line = ""
        while "remotelog partition-remover serving on 127.0.0.1:" not in line:
            line = (await first.stderr.readline()).decode()
            assert line, "the remover exited before serving"
        s3_faults("slow", 12, "DELETE", delay_ms=300)
        address = line.strip().rsplit(" ", 1)[1]
        async with PartitionRemoverClient(address, options=CLIENT_OPTIONS) as client:
            await client.mark_partitions_for_deletion([tip])
        # Killed (no lease release, no cleanup) once the first segment is gone.
        await eventually(lambda: _fewer_than(stack, tip, 4), interval_s=0.02)
    finally:
        first.kill()
        await first.communicate()
    left = await stack.segments(tip)
    assert 0 < len(left) < 4

    second = await stack.start_remover("second", **redis)
    status = await eventually(lambda: finished(second, tip))
    s3_faults(None)
    assert status.last_error_reason == ""
    assert stack.objects_of(tip) == {}
    names = lifecycle(events_of(stack.bootstrap, tip))
    assert names.count("DELETE_PARTITION_STARTED") == 1
    assert names.count("DELETE_PARTITION_FINISHED") == 1
    for s in segments:
        assert names.count(f"DELETE_SEGMENT_FINISHED@{s.remote_log_segment_id.id}") == 1


async def _fewer_than(stack, tip, count):
    return len(await stack.segments(tip)) < count


async def test_serve_partition_remover_reports_health_and_stops_on_sigterm(stack):
    stack.config("served")
    status, code, printed = await asyncio.to_thread(
        serve_until_sigterm,
        "partition-remover",
        stack.tmp / "served.properties",
        "remotelog.api.remover.v1.PartitionRemoverService",
    )
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert code == 0
    assert "shutting down" in printed


async def test_pending_deletions_list_and_gauge_while_the_store_is_down(
    stack, telemetry, s3_faults
):
    reader, _ = telemetry
    tips = [new_partition(name) for name in ("b-topic", "a-topic")]
    for tip in tips:
        await stack.tier(tip, 1)
    remover = await stack.start_remover(**{"remote.partition.remover.rpc.timeout.ms": "1000"})
    s3_faults("503", 100_000, "DELETE")
    try:
        await remover.client.mark_partitions_for_deletion(tips)
        await eventually(lambda: len(remover.app.tracker.pending()) == 2)
        pending = await pending_among(remover.client, tips)
        assert [p.topic_id_partition for p in pending] == sorted(tips, key=lambda t: t.topic)
        assert all(p.segments_remaining == 1 for p in pending)
        gauge = metric_points(
            reader, m.REMOTE_PARTITIONS_PENDING_DELETION.name, "remotelog.remover"
        )
        assert max(p.value for p in gauge) >= 2
    finally:
        s3_faults(None)
    for tip in tips:
        await eventually(lambda tip=tip: finished(remover, tip))
    assert await pending_among(remover.client, tips) == []
