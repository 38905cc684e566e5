"""OpenTelemetry's gRPC instrumentation, on channels and servers once a process has
installed a tracer provider: W3C trace context crosses every call, so one request
is one trace across the services. Nothing is added (or paid) otherwise."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Setter

_TRACER = "remotelog.protocol.tracing"


def tracing_configured() -> bool:
    """Whether spans go anywhere: a tracer provider was installed (the SDK's, by
    `serve` or by the application)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class _MetadataSetter(Setter[Any]):
    """W3C trace context into a call's metadata."""

    def set(self, carrier: Any, key: str, value: str) -> None:
        carrier[key] = value


class _CancellableStreamUnary(grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    """OpenTelemetry's client-streaming interceptor waits for the call to end before it
    hands the call back, so a caller's cancel() (or its task's cancellation) stops
    only that wait: the call went on reading the request stream and sending it until
    its deadline, and a cancelled copy finished on the store. This one hands the call
    back at once and ends the span when the call ends, or at once when the call
    cannot start. Its span is named and described as OpenTelemetry's are."""

    def __init__(self) -> None:
        self._tracer = trace.get_tracer(_TRACER)
        self._finishing: set[asyncio.Task[None]] = set()

    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        method = client_call_details.method
        method = method.decode() if isinstance(method, bytes) else method
        service, _, name = method.lstrip("/").partition("/")
        span = self._tracer.start_span(
            method,
            kind=trace.SpanKind.CLIENT,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
        )
        try:
            metadata = grpc.aio.Metadata(*tuple(client_call_details.metadata or ()))
            propagate.inject(metadata, trace.set_span_in_context(span), _MetadataSetter())
            call = await continuation(
                client_call_details._replace(metadata=metadata), request_iterator
            )
        except BaseException as error:
            span.record_exception(error)
            span.set_status(
                trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
            )
            span.end()
            raise

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
    # Imported only when traced: it reads every installed package's metadata, 60 ms
    # at each start of a Spark worker that makes a channel.
    from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters

    not_health = filters.negate(filters.health_check())
    interceptors = aio_client_interceptors(filter_=not_health)  # type: ignore[no-untyped-call]
    # The health service has no client-streaming method: no filter needed there.
    return [
        *(i for i in interceptors if not isinstance(i, grpc.aio.StreamUnaryClientInterceptor)),
        _CancellableStreamUnary(),
    ]


def server_tracing() -> list[Any]:
    """A server interceptor that continues the caller's trace in a span per call."""
    if not tracing_configured():
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    not_health = filters.negate(filters.health_check())
    return [aio_server_interceptor(filter_=not_health)]  # type: ignore[no-untyped-call]
