"""A served service exports its spans over OTLP where `otel.exporter.otlp.endpoint` or
OpenTelemetry's own OTEL_* variables say, named as they say (OTEL_SERVICE_NAME)."""

import os
import signal
import subprocess

import grpc
import pytest
from segmentstore.segments import segment_metadata
from support.otlp import Collector
from support.serving import serving_address

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc as pb_grpc
from remotelog.protocol.convert import segment_metadata_to_proto
from remotelog.rpc.serve import serve_command

FETCH = "/remotelog.api.segmentstore.v1.SegmentStoreService/FetchLogSegment"


@pytest.fixture
def collector():
    running = Collector()
    yield running
    running.stop()


@pytest.mark.parametrize("configured_by", ["properties", "environment"])
def test_spans_reach_the_collector_named_as_configured(tmp_path, collector, configured_by):
    config = tmp_path / "store.properties"
    properties = f"listen.address=127.0.0.1:0\nstorage.root={tmp_path / 'segments'}\n"
    environment = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    if configured_by == "properties":
        properties += f"otel.exporter.otlp.endpoint={collector.endpoint}\n"
        expected_name = "remotelog-segment-store"
    else:
        environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint
        environment["OTEL_SERVICE_NAME"] = "store-by-environment"
        expected_name = "store-by-environment"
    config.write_text(properties)
    process = subprocess.Popen(
        serve_command("segment-store", config), stderr=subprocess.PIPE, text=True, env=environment
    )
    try:
        address = serving_address(process.stderr, "segment-store")
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.SegmentStoreServiceStub(channel)
            request = pb.FetchLogSegmentRequest(
                remote_log_segment_metadata=segment_metadata_to_proto(segment_metadata(size=100))
            )
            with pytest.raises(grpc.RpcError) as missing:
                list(stub.FetchLogSegment(request, timeout=10))
            assert missing.value.code() is grpc.StatusCode.NOT_FOUND
        process.send_signal(signal.SIGTERM)  # the shutdown flushes what is batched
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.stderr.close()
    served = [(r, s) for r, s in collector.spans() if s.name == FETCH]
    assert served, [s.name for _, s in collector.spans()]
    resource, span = served[0]
    assert resource["service.name"] == expected_name
    assert span.kind == span.SPAN_KIND_SERVER
