"""`remotelog recover`: segments whose metadata was lost, written back from their manifests."""

import asyncio
import io
import json
import shutil
import uuid
from dataclasses import replace

import pytest
import pytest_asyncio
from support.data import MANIFESTS
from support.kafka_admin import create_topic
from support.services import new_partition, started
from support.tiering import batch
from support.waiting import eventually

from remotelog.api.metadata.v1 import metadata_pb2 as pb
from remotelog.api.metadata.v1 import metadata_pb2_grpc as pb_grpc
from remotelog.cli.main import main
from remotelog.cli.recover import INCOMPLETE, Progress
from remotelog.client import LogSegmentData
from remotelog.core.errors import InvalidArgumentError, MetadataNotReadyError
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
    kafka_uuid_str,
    parse_kafka_uuid,
)
from remotelog.core.states import RemoteLogSegmentState, RemotePartitionDeleteState
from remotelog.protocol.convert import segment_metadata_to_proto, topic_id_partition_to_proto
from remotelog.recovery.rebuild import Gap, lineage
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.key_providers import new_key_file
from remotelog.segmentstore.layout import SegmentKeys

from .conftest import RemoverStack

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@pytest_asyncio.fixture(params=["filesystem", "s3", "gcs", "azure"])
async def stack(request, tmp_path, broker, s3_endpoint, cloud_emulators):
    stack = RemoverStack(
        tmp_path,
        broker.bootstrap_servers,
        s3_endpoint,
        backend=request.param,
        emulators=cloud_emulators,
    )
    async with started(stack) as running:
        yield running


async def copied_only(stack, tip, start, count=10, *, epochs=None, broker_id=3):
    """A segment the store holds whose metadata was lost: copied, never written to the
    metadata manager. (Its metadata, the custom metadata its copy returned.)"""
    log = batch(start, count, size=50)
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        start,
        start + count - 1,
        1_000 + start,
        broker_id,
        1_700_000_000_000 + start,
        len(log),
        epochs or ((0, start),),
    )
    custom = await stack.store.client.copy_log_segment_data(
        metadata, LogSegmentData(log, b"\0" * 8, b"\0" * 12, b"snap", b"0\n1\n0 0\n")
    )
    return metadata, custom


async def recover(stack, *args):
    stack.recover_config()
    config = str(stack.tmp / "recover.properties")
    return await asyncio.to_thread(main, ["recover", "--config", config, *args])


async def listed(stack, tip):
    return [s async for s in stack.metadata.client.list_remote_log_segments(tip)]


def lines(output: str, kind: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(kind + "  ")]


async def test_lost_segments_are_written_as_kafka_would_once_and_a_dry_run_writes_nothing(
    stack, capsys
):
    lost = new_partition("recovered")
    copies = [await copied_only(stack, lost, start) for start in (0, 10, 20)]
    known = new_partition("known")
    await stack.tier(known, 2)

    assert await recover(stack, "--dry-run") == 0
    out = capsys.readouterr().out
    would = lines(out, "would write")
    assert [line.split()[3] for line in would] == [
        str(m.remote_log_segment_id.id) for m, _ in copies
    ]
    assert "offsets 10-19  leader epochs 0@10  broker 3" in would[1]
    assert "2 already known, 3 to write" in out
    assert "dry run, nothing written" in out
    assert await listed(stack, lost) == []

    assert await recover(stack) == 0
    out = capsys.readouterr().out
    assert len(lines(out, "wrote")) == 3
    assert "0 gaps, 0 overlaps, 0 manifests skipped" in out
    recovered = await listed(stack, lost)
    assert [s.state for s in recovered] == [FINISHED] * 3
    for segment, (original, custom) in zip(recovered, copies, strict=True):
        # Everything the manifest kept, and the custom metadata the copy returned.
        assert segment.remote_log_segment_id == original.remote_log_segment_id
        assert segment.custom_metadata == custom
        assert (segment.start_offset, segment.end_offset) == (
            original.start_offset,
            original.end_offset,
        )
        assert segment.segment_leader_epochs == original.segment_leader_epochs
        assert segment.segment_size_in_bytes == original.segment_size_in_bytes
        assert segment.max_timestamp_ms == original.max_timestamp_ms
        assert segment.broker_id == original.broker_id
        assert segment.event_timestamp_ms == original.event_timestamp_ms
    # What readers see: the recovered segment that holds an offset.
    found = await stack.metadata.client.remote_log_segment_metadata(lost, 0, 15)
    assert found is not None
    assert found.remote_log_segment_id == copies[1][0].remote_log_segment_id

    assert await recover(stack) == 0
    out = capsys.readouterr().out
    assert lines(out, "wrote") == []
    assert "5 already known, 0 written" in out
    assert len(await listed(stack, lost)) == 3


async def put(stack, key: str, body: bytes) -> None:
    config = stack.recover_config()
    backend = await open_backend(config, config.backoff())
    try:
        await backend.put(key, body)
    finally:
        await backend.close()


async def test_gaps_and_overlaps_are_reported_and_bad_manifests_skipped_by_key(stack, capsys):
    tip = new_partition("lineage")
    first, _ = await copied_only(stack, tip, 0)
    later, _ = await copied_only(stack, tip, 20)  # offsets 10-19 are in no segment
    # A retried copy after an unclean election: overlaps the one before, a new epoch.
    overlapping, _ = await copied_only(stack, tip, 25, epochs=((1, 25),))
    newer, _ = await copied_only(stack, tip, 40)
    damaged, _ = await copied_only(stack, tip, 50)
    misplaced_key = SegmentKeys.of(
        "",
        RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tip, uuid.uuid4()), 60, 69, 0, 0, 0, 1, ((0, 60),)
        ),
    ).manifest
    store = stack.recover_config()
    backend = await open_backend(store, store.backoff())
    try:
        manifest = json.loads(await backend.get(SegmentKeys.of("", newer).manifest))
        manifest["version"] = 3
        await backend.put(SegmentKeys.of("", newer).manifest, json.dumps(manifest).encode())
        await backend.put(SegmentKeys.of("", damaged).manifest, b'{"version": 1, "metad')
        # Another segment's manifest under a key that names a segment it is not.
        await backend.put(misplaced_key, await backend.get(SegmentKeys.of("", first).manifest))
    finally:
        await backend.close()

    assert await recover(stack, "--topic", "lineage") == INCOMPLETE
    out = capsys.readouterr().out
    assert lines(out, "gap") == ["gap  lineage-0  offsets 10-19 are in no segment"]
    (overlap,) = lines(out, "overlap")
    assert f"{later.remote_log_segment_id.id} (20-29) and " in overlap
    assert f"{overlapping.remote_log_segment_id.id} (25-34)" in overlap
    skipped = {line.split()[1]: line for line in lines(out, "skipped")}
    assert set(skipped) == {
        SegmentKeys.of("", newer).manifest,
        SegmentKeys.of("", damaged).manifest,
        misplaced_key,
    }
    assert (
        "manifest version 3 is newer than the 2 this remotelog reads"
        in skipped[SegmentKeys.of("", newer).manifest]
    )
    assert "unreadable manifest" in skipped[SegmentKeys.of("", damaged).manifest]
    assert "not the one its key names" in skipped[misplaced_key]
    # Every readable segment is written, the overlapping ones too.
    assert {s.remote_log_segment_id for s in await listed(stack, tip)} == {
        first.remote_log_segment_id,
        later.remote_log_segment_id,
        overlapping.remote_log_segment_id,
    }
    assert "1 gaps, 1 overlaps, 3 manifests skipped" in out


async def test_a_segment_known_only_as_started_is_completed_from_its_manifest(stack, capsys):
    tip = new_partition("in-flight")
    # Its copy is whole in the store, but its COPY_SEGMENT_FINISHED was never written
    # (lost with the topic's tail, or a recovery cut off between the two records).
    started_only, custom = await copied_only(stack, tip, 0)
    await stack.metadata.client.add_remote_log_segment_metadata(started_only)
    assert await recover(stack, "--topic", "in-flight", "--dry-run") == 0
    out = capsys.readouterr().out
    (would,) = lines(out, "would complete")
    assert str(started_only.remote_log_segment_id.id) in would
    assert "0 already known, 0 to write, 1 to complete" in out
    (segment,) = await listed(stack, tip)
    assert segment.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED

    assert await recover(stack, "--topic", "in-flight") == 0
    out = capsys.readouterr().out
    (completed,) = lines(out, "completed")
    assert str(started_only.remote_log_segment_id.id) in completed
    assert "0 already known, 0 written, 1 completed" in out
    (segment,) = await listed(stack, tip)
    assert segment.state is FINISHED
    assert segment.custom_metadata == custom
    assert await recover(stack, "--topic", "in-flight") == 0
    assert "1 already known, 0 written, 0 completed" in capsys.readouterr().out


@pytest.mark.parametrize("stack", ["filesystem"], indirect=True)
async def test_a_partition_being_recovered_is_not_ready_and_a_second_run_is_refused(stack, capsys):
    tip = new_partition("held")
    first, custom = await copied_only(stack, tip, 0)
    second, _ = await copied_only(stack, tip, 10)
    client = stack.metadata.client
    more = asyncio.Event()

    async def run_a():
        """A recovery that sends its first segment, then stalls (a large partition)."""
        yield pb.RecoverRemoteLogSegmentsRequest(
            topic_id_partition=topic_id_partition_to_proto(tip),
            recovery="run A on host-a",
            remote_log_segment_metadata=[
                segment_metadata_to_proto(replace(first, state=FINISHED, custom_metadata=custom))
            ],
        )
        await more.wait()

    async def ready() -> bool:
        return await client.is_ready(tip)

    await eventually(ready, timeout_s=10)  # its metadata partition loaded
    # A broker's copy under way when the recovery begins.
    under_way = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()), 20, 29, 0, 1, 0, 100, ((0, 20),)
    )
    await client.add_remote_log_segment_metadata(under_way)
    stub = pb_grpc.RemoteLogMetadataServiceStub(client.channel)
    call = stub.RecoverRemoteLogSegments(run_a(), timeout=60)

    async def first_written() -> bool:
        return len(await listed(stack, tip)) == 2

    await eventually(first_written, timeout_s=10)
    # Nothing tiers the partition meanwhile: Kafka's copy and expiration tasks ask
    # IsReady first, and a copy already under way is told "not ready" at its write.
    assert await client.is_ready(tip) is False
    next_copy = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()), 30, 39, 0, 1, 0, 100, ((0, 30),)
    )
    with pytest.raises(MetadataNotReadyError, match="being recovered by run A on host-a"):
        await client.add_remote_log_segment_metadata(next_copy, timeout_s=0.5)
    # The copy under way finishes all the same: its segment is whole, and Kafka would
    # copy it again under a new id if its last record were refused.
    await client.update_remote_log_segment_metadata(
        RemoteLogSegmentMetadataUpdate(under_way.remote_log_segment_id, 1, None, FINISHED, 1)
    )
    # A second run is refused, naming the first; its dry run still reports.
    assert await recover(stack, "--topic", "held") == 2
    err = capsys.readouterr().err
    assert err.startswith("remotelog: recover: ")
    assert f"{tip} is being recovered by run A on host-a; run again once it has ended" in err
    assert await recover(stack, "--topic", "held", "--dry-run") == 0
    (would,) = lines(capsys.readouterr().out, "would write")
    assert str(second.remote_log_segment_id.id) in would

    # Run A dies: its lease goes with its stream, and the partition is ready again.
    call.cancel()
    await eventually(ready, timeout_s=10)
    assert await recover(stack, "--topic", "held") == 0
    (wrote,) = lines(capsys.readouterr().out, "wrote")
    assert str(second.remote_log_segment_id.id) in wrote
    assert [s.state for s in await listed(stack, tip)] == [FINISHED] * 3
    assert await client.is_ready(tip)
    await client.add_remote_log_segment_metadata(next_copy)


@pytest.mark.parametrize("stack", ["s3"], indirect=True)
async def test_a_manifest_the_store_fails_to_read_fails_the_run_and_is_not_skipped(
    stack, s3_faults, capsys
):
    tip = new_partition("unanswered")
    await copied_only(stack, tip, 0)
    s3_faults("500", count=10_000, method="GET", suffix=".rsm-manifest")
    try:
        assert await recover(stack, "--topic", "unanswered") == 2
    finally:
        s3_faults(None)
    captured = capsys.readouterr()
    assert captured.err.startswith("remotelog: recover: s3://")
    assert ".rsm-manifest: " in captured.err  # the manifest, and S3's answer
    assert "InternalError" in captured.err
    assert "Traceback" not in captured.err
    assert lines(captured.out, "skipped") == []  # not a damaged manifest: unanswered
    assert await listed(stack, tip) == []
    assert await recover(stack, "--topic", "unanswered") == 0
    assert len(await listed(stack, tip)) == 1


async def test_only_the_named_topic_is_recovered(stack, capsys):
    wanted, other = new_partition("wanted"), new_partition("wanted-not")
    await copied_only(stack, wanted, 0)
    await copied_only(stack, other, 0)
    assert await recover(stack, "--topic", "wanted") == 0
    assert "1 segments in 1 partitions" in capsys.readouterr().out
    assert len(await listed(stack, wanted)) == 1
    assert await listed(stack, other) == []


async def deleted(stack, tip) -> None:
    """`tip` deleted as Kafka deletes a partition: marked, started, finished."""
    for state in (
        RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
        RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
        RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    ):
        await stack.metadata.client.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(tip, state, 1, 0)
        )


@pytest.mark.parametrize("stack", ["filesystem"], indirect=True)
async def test_only_segments_the_store_holds_as_sent_are_written(stack):
    """RecoverRemoteLogSegments takes no caller's word: each segment is checked against
    the store's manifest of it, and a batch with one that is not there, or not as its
    manifest says, is refused whole."""
    tip = new_partition("checked")
    held, custom = await copied_only(stack, tip, 0)
    sent = replace(held, state=FINISHED, custom_metadata=custom)
    client = stack.metadata.client
    phantom = replace(sent, remote_log_segment_id=RemoteLogSegmentId(tip, uuid.uuid4()))
    longer = replace(sent, end_offset=sent.end_offset + 5)
    for segments, field, why in (
        ([sent, phantom], "remote_log_segment_metadata", "holds no manifest of it"),
        (
            [longer],
            "remote_log_segment_metadata.end_offset",
            "is 14, its manifest in the store says 9",
        ),
        (
            [replace(sent, custom_metadata=b"{}")],
            "remote_log_segment_metadata.custom_metadata",
            "its manifest in the store says",
        ),
    ):
        with pytest.raises(InvalidArgumentError) as refused:
            await client.recover_remote_log_segments(tip, segments, recovery="a test")
        assert refused.value.field == field
        assert why in str(refused.value)
    assert await listed(stack, tip) == []
    # The same segment twice is written once; a second run writes nothing.
    done = await client.recover_remote_log_segments(tip, [sent, sent], recovery="a test")
    assert done.written == (sent.remote_log_segment_id,)
    again = await client.recover_remote_log_segments(tip, [sent], recovery="a test")
    assert (again.written, again.completed) == ((), ())


@pytest.mark.parametrize("stack", ["filesystem"], indirect=True)
async def test_a_deleted_partitions_leftovers_are_reported_and_the_rest_recovered(stack, capsys):
    """A bucket that kept a deleted incarnation's segments (its deletion cut short, the
    topic recorded it): the manager refuses that partition, the run goes on."""
    gone, kept = new_partition("gone"), new_partition("kept")
    await copied_only(stack, gone, 0)
    await copied_only(stack, kept, 0)
    await deleted(stack, gone)
    assert await recover(stack) == INCOMPLETE
    out = capsys.readouterr().out
    (refused,) = lines(out, "refused")
    assert refused.startswith(f"refused  gone-0  topic id {kafka_uuid_str(gone.topic_id)}  1 ")
    assert "was deleted" in refused
    assert len(await listed(stack, kept)) == 1
    assert "1 partitions refused" in out


@pytest.mark.parametrize("stack", ["filesystem"], indirect=True)
async def test_a_topic_of_two_incarnations_is_named_and_topic_id_picks_one(stack, capsys):
    earlier, live = new_partition("twice"), new_partition("twice")  # same name, two ids
    await copied_only(stack, earlier, 0)
    await copied_only(stack, live, 0)
    live_id = kafka_uuid_str(live.topic_id)
    assert await recover(stack, "--topic", "twice", "--topic-id", live_id, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "1 segments in 1 partitions" in out
    assert f"topic ids: twice {live_id}" in out
    assert await recover(stack, "--topic", "twice") == INCOMPLETE
    (both,) = lines(capsys.readouterr().out, "topic ids")
    assert both.startswith("topic ids  twice  ")
    assert live_id in both
    assert kafka_uuid_str(earlier.topic_id) in both
    assert await recover(stack, "--topic-id", live_id) == 2  # an id of no named topic
    assert "--topic-id: names an incarnation of --topic" in capsys.readouterr().err


@pytest.mark.parametrize("stack", ["filesystem"], indirect=True)
async def test_given_a_cluster_only_the_ids_it_has_are_recovered(stack, capsys):
    """After a total loss the bucket holds a deleted incarnation's leftovers beside the
    live topic's, and manifests of a topic the cluster no longer has at all."""
    name = f"alive-{uuid.uuid4().hex[:6]}"
    live_id = await asyncio.to_thread(create_topic, stack.bootstrap, name, partitions=2)
    live = TopicIdPartition(live_id, name, 1)
    earlier, gone = new_partition(name), new_partition(f"gone-{uuid.uuid4().hex[:6]}")
    written = [(await copied_only(stack, live, start))[0] for start in (0, 10)]
    await copied_only(stack, earlier, 0)
    await copied_only(stack, earlier, 10)
    await copied_only(stack, gone, 0)

    assert await recover(stack, "--bootstrap-server", stack.bootstrap) == 0
    out = capsys.readouterr().out
    assert [line.split("  ")[1] for line in lines(out, "wrote")] == [f"{name}-1"] * 2
    assert sorted(lines(out, "left")) == [
        f"left  {name}-0  topic id {kafka_uuid_str(earlier.topic_id)}  2 segments  "
        f"(the cluster's {name} is {kafka_uuid_str(live_id)})",
        f"left  {gone.topic}-0  topic id {kafka_uuid_str(gone.topic_id)}  1 segments  "
        f"(the cluster has no topic {gone.topic})",
    ]
    assert f"topic ids: {name} {kafka_uuid_str(live_id)} (the ids the cluster at " in out
    assert "; 2 partitions of other ids left)" in out
    assert [s.remote_log_segment_id for s in await listed(stack, live)] == [
        s.remote_log_segment_id for s in written
    ]
    assert await listed(stack, earlier) == []

    # Without the cluster, every id found is recovered, and the summary says so.
    assert await recover(stack, "--topic", gone.topic, "--dry-run") == 0
    assert "(as found in the store)" in capsys.readouterr().out
    assert await recover(stack, "--bootstrap-server", "nohost", "--dry-run") == 2
    assert "--bootstrap-server: nohost" in capsys.readouterr().err
    assert (
        await recover(
            stack,
            "--bootstrap-server",
            stack.bootstrap,
            "--topic",
            name,
            "--topic-id",
            kafka_uuid_str(live_id),
        )
        == 2
    )
    assert "--topic-id: the cluster names the live incarnation" in capsys.readouterr().err


@pytest.mark.parametrize("stack", ["filesystem"], indirect=True)
async def test_a_manifest_the_first_release_wrote_is_recovered(stack, capsys):
    shutil.copytree(
        MANIFESTS / "first-release", stack.store.config.storage_root, dirs_exist_ok=True
    )
    assert await recover(stack, "--topic", "orders") == 0
    assert "1 segments in 1 partitions" in capsys.readouterr().out
    tip = TopicIdPartition(parse_kafka_uuid("bxsOTCseTFWdQ4pfDB0uPw"), "orders", 3)
    (found,) = await listed(stack, tip)
    assert found.remote_log_segment_id.id == parse_kafka_uuid("C0qPLlx9ThmjtsLR4Pmotw")
    assert (found.start_offset, found.end_offset) == (1200, 2399)
    assert found.segment_leader_epochs == ((4, 1200), (5, 2000))
    assert (found.broker_id, found.max_timestamp_ms) == (2, 1_732_000_123_456)
    assert (found.segment_size_in_bytes, found.txn_index_empty) == (1_048_000, False)
    assert found.state is FINISHED
    # What the store's copy would have returned: the remote size, log and indexes.
    assert json.loads(found.custom_metadata)["remote_size"] == 1_048_000 + 6_068


async def test_recover_without_a_metadata_manager_is_a_one_line_error(stack, capsys):
    await copied_only(stack, new_partition("stranded"), 0)
    stack.recover_config(**{"metadata.manager.address": "127.0.0.1:1"})
    config = str(stack.tmp / "recover.properties")
    assert await asyncio.to_thread(main, ["recover", "--config", config]) == 2
    err = capsys.readouterr().err
    assert err.startswith("remotelog: recover: ")
    assert "Traceback" not in err


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_one_line_rewritten_on_a_terminal_and_nothing_elsewhere():
    tip = new_partition("shown")
    done = lineage(tip, [segment_at(tip, 0), segment_at(tip, 10)])
    done.missing = done.segments[1:]
    terminal, piped = Terminal(), io.StringIO()
    for stream in (terminal, piped):
        progress = Progress(stream)
        progress.partition_done(done, dry_run=False)
        progress.partition_done(done, dry_run=False)
        progress.end()
    assert terminal.getvalue() == (
        "\rrecovering: 1 partitions, 2 segments, 1 written (at shown-0)\x1b[K"
        "\rrecovering: 2 partitions, 4 segments, 2 written (at shown-0)\x1b[K"
        "\r\x1b[K"
    )
    assert piped.getvalue() == ""


def segment_at(tip, start, end=None):
    end = start + 9 if end is None else end
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()), start, end, 0, 0, 0, 100, ((0, start),)
    )


LINEAGE_TIP = new_partition("lineage-unit")


def lineage_segment(start, end):
    return segment_at(LINEAGE_TIP, start, end)


def test_lineage_reports_gaps_and_overlaps_in_offset_order():
    found = lineage(
        LINEAGE_TIP,
        [
            lineage_segment(30, 39),
            lineage_segment(0, 9),
            lineage_segment(10, 24),
            lineage_segment(20, 27),
        ],
    )
    assert [s.start_offset for s in found.segments] == [0, 10, 20, 30]
    assert found.gaps == [Gap(LINEAGE_TIP, 28, 29)]
    assert [(o.earlier.start_offset, o.later.start_offset) for o in found.overlaps] == [(10, 20)]


def test_a_segment_inside_a_longer_one_overlaps_it_and_leaves_no_gap_after():
    found = lineage(
        LINEAGE_TIP, [lineage_segment(0, 99), lineage_segment(10, 19), lineage_segment(100, 109)]
    )
    assert found.gaps == []
    assert [(o.earlier.start_offset, o.later.start_offset) for o in found.overlaps] == [(0, 10)]


async def test_encrypted_segments_are_recovered_and_read_back(
    tmp_path, broker, s3_endpoint, capsys
):
    """Version-2 manifests (compressed, encrypted under a local key ring) recover as
    plain ones do: recover reads no key, and the store opens the recovered segments."""
    ring = tmp_path / "keys"
    new_key_file(ring, "k1")
    encrypted = {
        "compression.enabled": "true",
        "chunk.size": str(64 * 1024),
        "encryption.key.provider": "local",
        "encryption.key.ring.dir": str(ring),
        "encryption.key.id": "k1",
    }
    stack = RemoverStack(
        tmp_path, broker.bootstrap_servers, s3_endpoint, backend="s3", store_settings=encrypted
    )
    async with started(stack) as running:
        lost = new_partition("encrypted")
        copies = [await copied_only(running, lost, start) for start in (0, 10)]
        assert await recover(running) == 0
        assert len(lines(capsys.readouterr().out, "wrote")) == 2
        recovered = await listed(running, lost)
        assert [s.remote_log_segment_id for s in recovered] == [
            m.remote_log_segment_id for m, _ in copies
        ]
        for segment, (original, custom) in zip(recovered, copies, strict=True):
            assert segment.custom_metadata == custom
            read = b"".join([c async for c in running.store.client.fetch_log_segment(segment, 0)])
            assert read == batch(original.start_offset, 10, size=50)
