"""A method handler rebuilt around its behavior, whatever its kind, for interceptors."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

Behavior = Callable[..., Any]
# (behavior, requests stream, responses stream) -> the behavior to serve instead
Wrap = Callable[[Behavior, bool, bool], Behavior]

_KINDS = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler, False, False),
    ("stream_unary", grpc.stream_unary_rpc_method_handler, True, False),
    ("unary_stream", grpc.unary_stream_rpc_method_handler, False, True),
    ("stream_stream", grpc.stream_stream_rpc_method_handler, True, True),
)


def rewrapped(
    handler: grpc.RpcMethodHandler,
    wrap: Wrap,
    *,
    request_deserializer: Callable[[bytes], Any] | None,
    response_serializer: Callable[[Any], bytes] | None,
) -> grpc.RpcMethodHandler:
    for attribute, make, requests_stream, responses_stream in _KINDS:
        behavior = getattr(handler, attribute)
        if behavior:
            return make(
                wrap(behavior, requests_stream, responses_stream),
                request_deserializer=request_deserializer,
                response_serializer=response_serializer,
            )
    raise ValueError(f"{handler!r} has no behavior")


class RewrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor that serves each method's handler rebuilt by `rewrap`."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return self.rewrap(handler, handler_call_details.method)

    @abc.abstractmethod
    def rewrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler to serve for `method` instead of `handler`."""
