"""`remotelog scrub` against the real store backends and metadata manager."""

import asyncio
import uuid
from pathlib import Path

import pytest_asyncio
from support.s3 import s3_client
from support.services import new_partition, started
from support.tiering import batch

from remotelog.cli.main import main
from remotelog.client import LogSegmentData
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
)
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.remover.scrub import Scrub
from remotelog.segmentstore.factory import open_backend
from remotelog.segmentstore.layout import SegmentKeys

from .conftest import RemoverStack

D = RemotePartitionDeleteState


@pytest_asyncio.fixture(params=["filesystem", "s3"])
async def stack(request, tmp_path, broker, s3_endpoint):
    stack = RemoverStack(tmp_path, broker.bootstrap_servers, s3_endpoint, backend=request.param)
    async with started(stack) as running:
        yield running


class Planted:
    """A bucket with live segments, exactly known orphans, an old upload and a stranger."""

    def __init__(self, stack):
        self.stack = stack
        self.live = new_partition("live")
        self.deleted = new_partition("gone", 1)
        self.orphans: set[str] = set()
        self.upload_key = ""

    async def plant(self):
        stack = self.stack
        live_segments = await stack.tier(self.live, 2)
        # A copy that crashed after its upload and before its metadata.
        log = batch(20, 5)
        crashed = segment_metadata(self.live, 20, len(log))
        await stack.store.client.copy_log_segment_data(
            crashed, LogSegmentData(log, b"", b"", b"", b"0\n0\n")
        )
        self.orphans |= set(SegmentKeys.of("", crashed).all)
        # A partition whose deletion finished but whose objects stayed behind.
        for segment in await stack.tier(self.deleted, 1):
            self.orphans |= set(SegmentKeys.of("", segment).all)
        for state in (D.DELETE_PARTITION_MARKED, D.DELETE_PARTITION_STARTED):
            await stack.metadata.client.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(self.deleted, state, 1, 0)
            )
        await stack.metadata.client.put_remote_partition_delete_metadata(
            RemotePartitionDeleteMetadata(self.deleted, D.DELETE_PARTITION_FINISHED, 1, 0)
        )
        self.live_keys = {k for s in live_segments for k in SegmentKeys.of("", s).all}
        self.upload_key = SegmentKeys.of("", segment_metadata(self.live, 40)).log
        self.start_upload()
        self.stranger = "notes/README.txt"
        self.put_stranger()

    def start_upload(self):
        stack = self.stack
        if stack.backend == "s3":
            s3_client(stack.s3_endpoint).create_multipart_upload(
                Bucket=stack.store.config.s3_bucket_name, Key=self.upload_key
            )
        else:
            path = Path(stack.store.config.storage_root) / f"{self.upload_key}.abc123.tmp"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"half a segment")

    def put_stranger(self):
        stack = self.stack
        if stack.backend == "s3":
            s3_client(stack.s3_endpoint).put_object(
                Bucket=stack.store.config.s3_bucket_name, Key=self.stranger, Body=b"hello"
            )
        else:
            path = Path(stack.store.config.storage_root) / self.stranger
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"hello")


def segment_metadata(tip, start, size=100):
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()), start, start + 4, 1_000, 0, 0, size, ((0, start),)
    )


async def run_cli(*args):
    return await asyncio.to_thread(main, ["scrub", *args])


def reported(output: str, kind: str) -> set[str]:
    return {line.split()[1] for line in output.splitlines() if line.startswith(kind + " ")}


async def test_scrub_reports_exactly_the_planted_orphans_and_deletes_only_when_asked(stack, capsys):
    planted = Planted(stack)
    await planted.plant()
    before = stack.store.objects()
    stack.scrub_config()
    config = str(stack.tmp / "scrub.properties")
    await asyncio.sleep(1.1)  # S3 keeps whole seconds: every object is now older than 0 s

    # Within the grace period nothing is an orphan.
    assert await run_cli("--config", config, "--older-than", "1h") == 0
    out = capsys.readouterr().out
    assert reported(out, "orphan") == set()
    # moto dates every multipart upload 2010-11-10 (real S3 gives the true time).
    assert reported(out, "upload") == ({planted.upload_key} if stack.backend == "s3" else set())
    assert "6 unreferenced but younger than --older-than" in out

    assert await run_cli("--config", config, "--older-than", "0s") == 0
    out = capsys.readouterr().out
    assert reported(out, "orphan") == planted.orphans
    assert reported(out, "upload") == {planted.upload_key}
    assert reported(out, "unknown") == {planted.stranger}
    assert "its partition was deleted" in out
    assert "no metadata references its segment" in out
    assert "nothing deleted (pass --delete to remove them)" in out
    assert stack.store.objects() == before
    assert stack.store.incomplete_uploads() == 1

    assert await run_cli("--config", config, "--older-than", "0s", "--delete") == 0
    out = capsys.readouterr().out
    assert "deleted 6 orphans, aborted 1 uploads" in out
    after = stack.store.objects()
    assert set(after) == planted.live_keys | {planted.stranger}
    assert stack.store.incomplete_uploads() == 0
    assert len([s async for s in stack.metadata.client.list_remote_log_segments(planted.live)]) == 2

    # A second pass finds nothing left to do.
    assert await run_cli("--config", config, "--older-than", "0s") == 0
    out = capsys.readouterr().out
    assert reported(out, "orphan") == set()
    assert reported(out, "upload") == set()


async def test_scrub_deletes_a_segment_manifest_first(stack):
    planted = Planted(stack)
    await planted.plant()
    backend = await open_backend(stack.scrub_config(), stack.scrub_config().backoff())
    deleted: list[str] = []
    original = backend.delete

    async def recording(keys):
        deleted.extend(keys)
        await original(keys)

    backend.delete = recording
    try:
        scrub = Scrub(backend, stack.metadata.client, grace_s=0, clock=lambda: 4e9)
        report = await scrub.run(delete=True)
    finally:
        await backend.close()
    assert {o.object.key for o in report.orphans} == planted.orphans
    for start in range(0, len(deleted), 3):
        assert [k.rsplit(".", 1)[1] for k in deleted[start : start + 3]] == [
            "rsm-manifest",
            "indexes",
            "log",
        ]


async def test_scrub_without_a_metadata_manager_is_an_error_not_a_guess(stack, capsys):
    await stack.tier(new_partition("live"), 1)
    stack.scrub_config(**{"metadata.manager.address": "127.0.0.1:1"})
    config = str(stack.tmp / "scrub.properties")
    assert await run_cli("--config", config, "--older-than", "0s", "--delete") == 2
    err = capsys.readouterr().err
    assert err.startswith("remotelog: scrub: ")
    assert "Traceback" not in err
    assert len(stack.store.objects()) == 3
