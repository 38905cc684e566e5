"""`remotelog serve segment-store`: health, graceful stop; metrics and spans of the store."""

import os
import subprocess
import uuid

import pytest
from grpc_health.v1 import health_pb2
from support.services import start_store
from support.serving import serve_until_sigterm
from support.telemetry import counter

from remotelog.rpc.serve import serve_command

from .segments import segment_metadata, synthetic_files

SERVICE = "remotelog.api.segmentstore.v1.SegmentStoreService"


async def test_copy_and_fetch_report_metrics_and_spans(telemetry, tmp_path, s3_endpoint):
    reader, spans = telemetry
    running = await start_store("filesystem", tmp_path, s3_endpoint, "unused")
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    try:
        metadata = segment_metadata(size=5000, topic=topic)
        await running.client.copy_log_segment_data(metadata, synthetic_files(os.urandom(5000)))
        fetched = b"".join(
            [c async for c in running.client.fetch_log_segment(metadata, 1000, 1999)]
        )
        assert len(fetched) == 1000
        bad = segment_metadata(size=10, topic=topic)  # never copied
        with pytest.raises(Exception):  # noqa: B017, PT011 - NOT_FOUND, checked by the contract
            [c async for c in running.client.fetch_log_segment(bad, 0)]
    finally:
        await running.client.close()
        await running.service.stop(1)
    indexes = 16 + 24 + 4 + len(b"0\n1\n0 0\n")
    assert counter(reader, "RemoteCopyBytesPerSec", topic) == 5000 + indexes
    assert counter(reader, "RemoteCopyRequestsPerSec", topic) == 1
    assert counter(reader, "RemoteCopyErrorsPerSec", topic) == 0
    assert counter(reader, "RemoteFetchBytesPerSec", topic) == 1000
    assert counter(reader, "RemoteFetchRequestsPerSec", topic) == 2
    assert counter(reader, "RemoteFetchErrorsPerSec", topic) == 1
    names = [s.name for s in spans.get_finished_spans() if s.attributes.get("topic") == topic]
    assert "SegmentStore.copy_log_segment_data" in names
    assert "SegmentStore.fetch_log_segment" in names


def test_serve_reports_health_and_stops_on_sigterm(tmp_path):
    config = tmp_path / "store.properties"
    config.write_text(f"listen.address=127.0.0.1:0\nstorage.root={tmp_path / 'data'}\n")
    status, code, printed = serve_until_sigterm("segment-store", config, SERVICE)
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert code == 0
    assert "shutting down" in printed


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ("storage.backend=s3\n", "storage.s3.bucket.name: is required"),
        ("storage.backend=hdfs\n", "storage.backend"),
        ("key.prefix=../x/\n", "key.prefix"),
    ],
)
def test_serve_refuses_bad_config_in_one_line(tmp_path, properties, message):
    config = tmp_path / "bad.properties"
    config.write_text("listen.address=127.0.0.1:0\n" + properties)
    result = subprocess.run(
        serve_command("segment-store", config),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
