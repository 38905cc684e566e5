"""`remotelog serve metadata-manager`: health, graceful stop with a snapshot; metrics."""

import subprocess

from grpc_health.v1 import health_pb2
from support.services import metadata_config, new_partition, start_metadata
from support.serving import serve_until_sigterm, sigterm_while_starting
from support.telemetry import metric_points

from remotelog.core import metrics as m
from remotelog.dev.broker import free_port
from remotelog.metadata import snapshot as snapshots
from remotelog.rpc.serve import serve_command

from .scenarios import COPIED, Seg, metadata_of, update_of

SERVICE = "remotelog.api.metadata.v1.RemoteLogMetadataService"


async def test_metrics_count_segments_and_time_reads_and_writes(telemetry, tmp_path, broker):
    reader, _ = telemetry
    running = await start_metadata(metadata_config(tmp_path, broker.bootstrap_servers))
    try:
        reads_before = sum(p.count for p in metric_points(reader, m.METADATA_READ_LATENCY.name))
        writes_before = sum(p.count for p in metric_points(reader, m.METADATA_WRITE_LATENCY.name))
        tip = new_partition("metered")
        for number in range(3):
            metadata = metadata_of(tip, Seg(f"m{number}", number * 10, number * 10 + 9, {0: 0}))
            await running.client.add_remote_log_segment_metadata(metadata)
            await running.client.update_remote_log_segment_metadata(update_of(metadata, COPIED))
        assert await running.client.highest_offset_for_epoch(tip, 0) == 29
        [gauge] = metric_points(reader, m.METADATA_SEGMENTS.name)
        assert gauge.value == running.manager.segment_count()
        assert gauge.value >= 3
        reads = sum(p.count for p in metric_points(reader, m.METADATA_READ_LATENCY.name))
        writes = sum(p.count for p in metric_points(reader, m.METADATA_WRITE_LATENCY.name))
        assert reads - reads_before == 1
        assert writes - writes_before == 6
    finally:
        await running.stop()


def test_serve_reports_health_and_writes_a_snapshot_on_sigterm(tmp_path, broker):
    config = metadata_config(tmp_path, broker.bootstrap_servers, "served")
    properties = tmp_path / "served.properties"
    status, code, printed = serve_until_sigterm("metadata-manager", properties, SERVICE)
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert code == 0
    assert "shutting down" in printed
    loaded = snapshots.load(tmp_path / "served" / "snapshots")
    assert loaded is not None
    assert loaded.num_partitions == config.metadata_topic_num_partitions


def test_sigterm_while_it_waits_for_the_broker_stops_it_cleanly(tmp_path):
    # No broker on this port: the start retries for two minutes unless stopped.
    metadata_config(
        tmp_path,
        f"127.0.0.1:{free_port()}",
        "starting",
        **{"remote.log.metadata.initialization.retry.max.timeout.ms": "120000"},
    )
    code, printed = sigterm_while_starting("metadata-manager", tmp_path / "starting.properties")
    assert code == 0, printed
    assert "remotelog metadata-manager stopped while starting" in printed
    assert "serving on" not in printed
    assert "Traceback" not in printed


def test_serve_refuses_a_metadata_topic_with_another_partition_count(tmp_path, broker):
    metadata_config(
        tmp_path,
        broker.bootstrap_servers,
        "mismatch",
        **{"remote.log.metadata.topic.num.partitions": "9"},
    )
    result = subprocess.run(
        serve_command("metadata-manager", tmp_path / "mismatch.properties"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "remote.log.metadata.topic.num.partitions: is 9 but the existing topic" in result.stderr
    assert "Traceback" not in result.stderr
