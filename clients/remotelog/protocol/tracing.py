"""OpenTelemetry's gRPC instrumentation, on channels and servers once a process has
installed a tracer provider: W3C trace context crosses every call, so one request
is one trace across the services. Nothing is added (or paid) otherwise."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.grpc import (
    aio_client_interceptors,
    aio_server_interceptor,
    filters,
)


def tracing_configured() -> bool:
    """Whether spans go anywhere: a tracer provider was installed (the SDK's, by
    `serve` or by the application)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def client_tracing() -> list[Any]:
    """Client interceptors that start a span per call and send its context along."""
    if not tracing_configured():
        return []
    not_health = filters.negate(filters.health_check())
    return list(aio_client_interceptors(filter_=not_health))  # type: ignore[no-untyped-call]


def server_tracing() -> list[Any]:
    """A server interceptor that continues the caller's trace in a span per call."""
    if not tracing_configured():
        return []
    not_health = filters.negate(filters.health_check())
    return [aio_server_interceptor(filter_=not_health)]  # type: ignore[no-untyped-call]
