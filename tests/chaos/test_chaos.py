"""The chaos soaks, short: a minute or two each here, `make chaos` for the long run.

The first drives the sidecar path: the copy scheduler tiers simulated log directories,
and Apache Kafka, SIGKILLed and restarted from its own log dir like every other part,
holds the metadata topic; the segment store has an S3 server of its own, which the
killer makes fail. The second drives the default mode: Kafka tiers through the plugin
over S3, by URL, under a running producer while the store, the metadata manager and
the broker are killed or hung (plugin_soak.py).
"""

import os
import uuid

import pytest
from support.s3 import s3_client
from support.servers import RedisServer, S3Server

from remotelog.dev.stack import SERVICES, DevConfig, DevStack

from .plugin_soak import S3_LINK, VICTIMS, PluginSoak, PluginSoakConfig, plugin_soak_stack
from .soak import Soak, SoakConfig, Writer

CHAOS_SECONDS = float(os.environ.get("CHAOS_SECONDS", "25"))


@pytest.fixture
def store_s3():
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def redis_server(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


def bucket(endpoint: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


async def test_nothing_is_lost_when_any_part_is_killed(tmp_path, store_s3, redis_server, capsys):
    segment_store = {
        "storage.backend": "s3",
        "storage.s3.bucket.name": bucket(store_s3.endpoint, "segments"),
        "storage.s3.endpoint.url": store_s3.endpoint,
        "storage.s3.path.style.access.enabled": "true",
        "storage.aws.access.key.id": "test",
        "storage.aws.secret.access.key": "test",
    }
    # Retries come back within a second or two of a restart or an S3 fault.
    backoff = {
        "remote.log.manager.task.retry.backoff.ms": "100",
        "remote.log.manager.task.retry.backoff.max.ms": "2000",
    }
    overrides = {
        "segment-store": segment_store,
        # Snapshots often, so the final restart loads one and replays only a tail.
        "metadata-manager": {"remote.log.metadata.snapshot.interval.events": "200"},
        "copy-scheduler": backoff,
        "partition-remover": backoff,
    }
    config = SoakConfig.for_seconds(CHAOS_SECONDS)
    data_dir = tmp_path / "data"
    with DevStack(
        DevConfig(
            data_dir,
            redis_url=redis_server.url,
            broker="kafka",
            mode="simulated",
            overrides=overrides,
        )
    ) as stack:
        writer = Writer(stack.data_dir, config)
        report = await Soak(stack, writer, redis_server, store_s3, config).run()
    with capsys.disabled():
        print("\nchaos soak, " + f"{CHAOS_SECONDS:.0f} s:", *report.lines(), sep="\n  ")

    assert report.failures == []
    assert report.segments_lost == 0
    assert report.orphans_after_scrub == 0
    assert report.replay_matches
    # Every part was killed at least once, and the readers checked records throughout.
    assert set(report.kills) == {*SERVICES, "kafka", "redis"}
    assert report.records_verified > 0
    assert report.segments_verified == report.segments_tiered > 0


async def test_kafka_with_the_plugin_loses_nothing_when_any_part_is_killed_or_hung(
    tmp_path, capsys
):
    config = PluginSoakConfig(CHAOS_SECONDS)
    s3 = S3Server(**S3_LINK)
    try:
        stack_config = plugin_soak_stack(tmp_path / "data", s3.endpoint, bucket(s3.endpoint, "p"))
        with DevStack(stack_config) as stack:
            report = await PluginSoak(stack, s3, config).run()
    finally:
        s3.stop()
    with capsys.disabled():
        print(
            "\nchaos soak, plugin mode, " + f"{CHAOS_SECONDS:.0f} s:", *report.lines(), sep="\n  "
        )

    assert report.failures == []
    # Each part was killed and hung at least once, and records were checked throughout.
    assert {f"{victim} {fault}" for victim in VICTIMS for fault in ("kill", "stop")} <= set(
        report.faults
    )
    assert report.records_acknowledged > 0
    # Readers checked records while parts were killed and hung, and the audit read every
    # acknowledged record back at its offset (a lost or duplicated one is a failure).
    assert report.records_checked > 0
    assert report.records_audited >= report.records_acknowledged
    assert report.segments_tiered > 0
    # Over S3 behind the link: every copy by URL, through SlowDowns and cut-off GETs.
    assert report.copies_by_url > 0
    assert report.s3["slowed_down"] + report.s3["cut"] > 0
