"""OpenTelemetry set-up for a served process: OTLP export of spans and metrics, or none.

Code everywhere uses only the OpenTelemetry API (no-op until a provider is
installed); `serve` installs the SDK providers here, once per process.
"""

from __future__ import annotations

from opentelemetry import metrics, trace
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from remotelog.core.settings import ServerSettings
from remotelog.core.version import __version__


def configure_telemetry(service_name: str, settings: ServerSettings) -> TracerProvider | None:
    """Export to `otel.exporter.otlp.endpoint` if set; returns the tracer provider to shut down."""
    if not settings.otlp_endpoint:
        return None
    resource = Resource.create(
        {"service.name": f"remotelog-{service_name}", "service.version": __version__}
    )
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint, insecure=True))
    )
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=settings.otlp_endpoint, insecure=True),
        export_interval_millis=settings.otlp_export_interval_ms,
    )
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    return tracer_provider
