"""OpenTelemetry set-up for a served process: OTLP export of spans and metrics, a
Prometheus scrape endpoint for the metrics, or neither.

Code everywhere uses only the OpenTelemetry API (no-op until a provider is
installed); `serve` installs the SDK providers here, once per process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from opentelemetry import metrics, trace
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CollectorRegistry, start_http_server

from remotelog.core.settings import ServerSettings
from remotelog.core.version import __version__

# OpenTelemetry's own variables that name where to export (the SDK reads them).
_OTEL_ENDPOINTS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)


@dataclass
class Telemetry:
    """What was installed, to flush and close at shutdown."""

    closers: list[Callable[[], object]] = field(default_factory=list)
    metrics_port: int | None = None

    def shutdown(self) -> None:
        for close in reversed(self.closers):
            close()


def _resource(service_name: str, environ: Mapping[str, str]) -> Resource:
    attributes = {"service.version": __version__}
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if not named:  # the variables name it as OpenTelemetry documents; else this
        attributes["service.name"] = f"remotelog-{service_name}"
    return Resource.create(attributes)


def _prometheus(address: str, telemetry: Telemetry) -> MetricReader:
    """A reader whose metrics `GET http://<address>/metrics` returns."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    try:
        server, _ = start_http_server(int(port), addr=host.strip("[]"), registry=registry)
    except OSError as exc:
        raise OSError(f"metrics.listen.address: cannot listen on {address!r}: {exc}") from None
    telemetry.metrics_port = server.server_address[1]
    telemetry.closers.append(server.server_close)
    telemetry.closers.append(server.shutdown)
    return reader


def configure_telemetry(
    service_name: str, settings: ServerSettings, environ: Mapping[str, str] = os.environ
) -> Telemetry:
    """Spans and metrics over OTLP to `otel.exporter.otlp.endpoint`, or where the
    standard OTEL_EXPORTER_OTLP_* variables say (unless OTEL_SDK_DISABLED=true);
    metrics on `metrics.listen.address` for Prometheus. OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and the exporters' OTEL_*
    settings apply as OpenTelemetry documents them."""
    telemetry = Telemetry()
    disabled = environ.get("OTEL_SDK_DISABLED", "").lower() == "true"
    endpoint = settings.otlp_endpoint or None
    exporting = not disabled and (
        endpoint is not None or any(environ.get(name) for name in _OTEL_ENDPOINTS)
    )
    readers: list[MetricReader] = []
    resource = _resource(service_name, environ)
    # The key's http:// endpoint is plaintext; without it the variables decide.
    insecure = True if endpoint and endpoint.startswith("http://") else None
    if exporting:
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=insecure))
        )
        trace.set_tracer_provider(tracer_provider)
        telemetry.closers.append(tracer_provider.shutdown)
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=endpoint, insecure=insecure),
                export_interval_millis=settings.otlp_export_interval_ms,
            )
        )
    if settings.metrics_listen_address:
        readers.append(_prometheus(settings.metrics_listen_address, telemetry))
    if readers:
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(meter_provider)
        telemetry.closers.insert(0, meter_provider.shutdown)
    return telemetry
