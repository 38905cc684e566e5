"""A broker outage in the middle of writes: UNAVAILABLE within the bound, nothing lost or doubled.

Tansu runs on its S3 storage engine against the test S3 server, so what it
acknowledged before it stopped is still there after it starts again.
"""

import asyncio
import uuid

import pytest
from support.s3 import s3_client
from support.services import S3_ENGINE_FETCH_WAIT, loading_state, metadata_config, new_partition
from support.waiting import eventually

from remotelog.core.errors import MetadataTopicUnavailableError
from remotelog.dev.broker import EmbeddedBroker
from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager

from .scenarios import COPIED, Seg, metadata_of, update_of


@pytest.fixture
def durable_broker(tmp_path, s3_endpoint):
    bucket = f"tansu-{uuid.uuid4().hex[:10]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    broker = EmbeddedBroker(
        storage_engine=f"s3://{bucket}/",
        s3_endpoint=s3_endpoint,
        s3_access_key_id="test",
        s3_secret_access_key="test",
        log_path=tmp_path / "tansu.log",
    )
    broker.start()
    yield broker
    broker.stop()


async def test_outage_gives_unavailable_then_success_and_no_event_is_lost(tmp_path, durable_broker):
    config = metadata_config(
        tmp_path,
        durable_broker.bootstrap_servers,
        "outage",
        **S3_ENGINE_FETCH_WAIT,
        **{"remote.log.metadata.consume.wait.ms": "1500"},
    )
    manager = TopicBasedRemoteLogMetadataManager(config)
    await manager.start()
    tip = new_partition("durable")
    manager.on_partition_leadership_changes([tip], [])
    try:
        await eventually(lambda: manager.is_ready(tip), interval_s=0.01)
        acknowledged = []
        for number in range(3):
            metadata = metadata_of(tip, Seg(f"k{number}", number * 10, number * 10 + 9, {0: 0}))
            await manager.add_remote_log_segment_metadata(metadata)
            await manager.update_remote_log_segment_metadata(update_of(metadata, COPIED))
            acknowledged.append(metadata)

        durable_broker.stop()
        during = metadata_of(tip, Seg("k3", 30, 39, {0: 0}))
        # Bounded by consume.wait.ms, not a hang (wait_for fails the test with
        # a TimeoutError instead, far past the bound so a slow machine passes).
        with pytest.raises(MetadataTopicUnavailableError, match="within 1500 ms"):
            await asyncio.wait_for(manager.add_remote_log_segment_metadata(during), 30)

        durable_broker.start()
        # The caller retries; the write is idempotent whether or not the first try landed.
        for _ in range(100):
            try:
                await manager.add_remote_log_segment_metadata(during)
                break
            except MetadataTopicUnavailableError:
                await asyncio.sleep(0.1)
        await manager.update_remote_log_segment_metadata(update_of(during, COPIED))
        acknowledged.append(during)

        listed = manager.list_remote_log_segments(tip)
        assert [m.remote_log_segment_id for m in listed] == [
            m.remote_log_segment_id for m in acknowledged
        ]
        assert {m.state for m in listed} == {COPIED}
    finally:
        await manager.close()

    # A fresh instance replaying the topic (no snapshot) finds the same: nothing
    # acknowledged before the outage was lost by the broker's restart.
    fresh = TopicBasedRemoteLogMetadataManager(
        metadata_config(tmp_path, durable_broker.bootstrap_servers, "fresh", **S3_ENGINE_FETCH_WAIT)
    )
    await fresh.start()
    try:
        fresh.on_partition_leadership_changes([tip], [])
        await eventually(
            lambda: fresh.is_ready(tip),
            interval_s=0.01,
            why=lambda: loading_state(fresh, durable_broker),
        )
        assert fresh.list_remote_log_segments(tip) == listed
    finally:
        await fresh.close()
