"""OpenTelemetry set-up for a served process: OTLP export of spans and metrics, or none.

Code everywhere uses only the OpenTelemetry API (no-op until a provider is
installed); `serve` installs the SDK providers here, once per process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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

# OpenTelemetry's own variables that name where to export (the SDK reads them).
_OTEL_ENDPOINTS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)


def configure_telemetry(
    service_name: str, settings: ServerSettings, environ: Mapping[str, str] = os.environ
) -> TracerProvider | None:
    """Export spans and metrics over OTLP to `otel.exporter.otlp.endpoint`, or where the
    standard OTEL_EXPORTER_OTLP_* variables say; None (nothing exported) if neither is
    set or OTEL_SDK_DISABLED=true. OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
    OTEL_TRACES_SAMPLER and the exporters' OTEL_* settings apply as OpenTelemetry
    documents them. Returns the tracer provider to shut down."""
    if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    endpoint = settings.otlp_endpoint or None
    if endpoint is None and not any(environ.get(name) for name in _OTEL_ENDPOINTS):
        return None
    # The key's http:// endpoint is plaintext; without it the variables decide.
    insecure = True if endpoint and endpoint.startswith("http://") else None
    attributes = {"service.version": __version__}
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if not named:  # the variables name it as OpenTelemetry documents; else this
        attributes["service.name"] = f"remotelog-{service_name}"
    resource = Resource.create(attributes)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=insecure))
    )
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint, insecure=insecure),
        export_interval_millis=settings.otlp_export_interval_ms,
    )
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    return tracer_provider
