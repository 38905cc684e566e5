"""Uploads no copy will finish: a copy cut off with its store or broker killed leaves a
temp file or an S3 multipart upload, and Kafka may never delete that attempt (it retries
a failed delete only once retention reaches the segment). The store aborts them once
older than any copy may take, on each backend, and nothing else."""

import os
import time

import pytest
from support.services import start_store
from support.waiting import eventually

from remotelog.segmentstore.abandoned_uploads import AbandonedUploads
from remotelog.segmentstore.layout import SegmentKeys

from .segments import segment_metadata, synthetic_files
from .test_contract import MIB, abandon_upload, fetch

FOREIGN = "backups/not-a-segment.bin"


def left(running) -> list[str]:
    """The keys of the store's incomplete uploads."""
    return sorted(running.incomplete_upload_keys())


async def test_a_sweep_aborts_the_uploads_of_segments_older_than_its_age_only(store):
    old = SegmentKeys.of("", segment_metadata(size=1)).log
    await abandon_upload(store, old)
    await abandon_upload(store, FOREIGN)  # a bucket shared with others: not the store's
    now = [time.time()]
    sweeper = AbandonedUploads(store.service.app.objects, "", after_s=3600, clock=lambda: now[0])
    assert await sweeper.sweep() == 0
    assert left(store) == sorted([old, FOREIGN])

    # Aged by the sweeper's own clock too: a backend's dates alone do not abort
    # (moto's are all of 2010).
    now[0] += 3601
    assert await sweeper.sweep() == 1
    assert left(store) == [FOREIGN]
    assert await sweeper.sweep() == 0


@pytest.mark.parametrize("backend", ["filesystem", "s3", "gcs", "azure"])
async def test_the_store_aborts_abandoned_uploads_by_itself_and_keeps_its_segments(
    backend, tmp_path, s3_endpoint, cloud_emulators
):
    running = await start_store(
        backend,
        tmp_path,
        s3_endpoint,
        emulators=cloud_emulators,
        **{"incomplete.uploads.abort.after.ms": "2000"},
    )
    try:
        data = os.urandom(MIB)
        copied = segment_metadata(size=len(data))
        await running.client.copy_log_segment_data(copied, synthetic_files(data))
        await abandon_upload(running, SegmentKeys.of("", segment_metadata(size=1)).log)
        await abandon_upload(running, FOREIGN)

        await eventually(lambda: left(running) == [FOREIGN], why=lambda: left(running))
        assert await fetch(running, copied) == data
    finally:
        await running.stop()
