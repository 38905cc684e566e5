"""OpenTelemetry's gRPC instrumentation, on channels and servers once a process has
installed a tracer provider: W3C trace context crosses every call, so one request
is one trace across the services. Nothing is added (or paid) otherwise."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import (
    aio_client_interceptors,
    aio_server_interceptor,
    filters,
)
from opentelemetry.instrumentation.grpc._aio_client import StreamUnaryAioClientInterceptor


def tracing_configured() -> bool:
    """Whether spans go anywhere: a tracer provider was installed (the SDK's, by
    `serve` or by the application)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class _CancellableStreamUnary(StreamUnaryAioClientInterceptor):
    """OpenTelemetry's client-streaming interceptor waits for the call to end before it
    hands the call back, so a caller's cancel() (or its task's cancellation) stops
    only that wait: the call went on reading the request stream and sending it until
    its deadline, and a cancelled copy finished on the store. This one hands the call
    back at once and ends the span when the call ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._finishing: set[asyncio.Task[None]] = set()

    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        if self.tracing_skipped(client_call_details):  # type: ignore[no-untyped-call]
            return await continuation(client_call_details, request_iterator)
        method = client_call_details.method
        with self._start_interceptor_span(method) as span:  # type: ignore[no-untyped-call]
            details = self.propagate_trace_in_details(client_call_details)
            call = await continuation(details, request_iterator)

        def done(finished: grpc.aio.Call) -> None:
            task = asyncio.get_running_loop().create_task(self._end(span, finished))
            self._finishing.add(task)
            task.add_done_callback(self._finishing.discard)

        call.add_done_callback(done)
        return call

    async def _end(self, span: trace.Span, call: grpc.aio.Call) -> None:
        code = await call.code()
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code is not grpc.StatusCode.OK:
            details = await call.details()
            span.set_status(trace.Status(trace.StatusCode.ERROR, f"{code.name}: {details}"))
        span.end()


def client_tracing() -> list[Any]:
    """Client interceptors that start a span per call and send its context along."""
    if not tracing_configured():
        return []
    not_health = filters.negate(filters.health_check())
    interceptors = list(aio_client_interceptors(filter_=not_health))  # type: ignore[no-untyped-call]
    return [
        _CancellableStreamUnary(i._tracer, filter_=not_health)
        if isinstance(i, StreamUnaryAioClientInterceptor)
        else i
        for i in interceptors
    ]


def server_tracing() -> list[Any]:
    """A server interceptor that continues the caller's trace in a span per call."""
    if not tracing_configured():
        return []
    not_health = filters.negate(filters.health_check())
    return [aio_server_interceptor(filter_=not_health)]  # type: ignore[no-untyped-call]
