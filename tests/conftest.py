import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
S3_SERVER = Path(__file__).resolve().parent / "support" / "s3_server.py"


@pytest.fixture(scope="session")
def kafka_logs() -> Path:
    """Real broker-written partition directories (read-only; see shared/kafka-logs/README.md)."""
    path = SHARED / "kafka-logs"
    if not path.is_dir():
        pytest.fail(f"shared test data missing: {path}")
    return path


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on a free loopback port, in its own process."""
    process = subprocess.Popen(
        [sys.executable, str(S3_SERVER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        pytest.fail(f"moto server did not start: {line!r}")
    yield f"http://127.0.0.1:{int(line.split()[1])}"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def telemetry():
    """In-memory SDK providers, installed once for the process (OpenTelemetry allows one)."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    return reader, spans
