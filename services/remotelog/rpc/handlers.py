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

    def __init__(self) -> None:
        # gRPC asks on every call; a method's handler is the same object each time
        # (the interceptors after this one keep theirs too), so it is rebuilt once.
        # Only registered methods get here with a handler: the map is bounded.
        self._rewrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        kept = self._rewrapped.get(method)
        if kept is not None and kept[0] is handler:
            return kept[1]
        rewrapped = self.rewrap(handler, method)
        self._rewrapped[method] = (handler, rewrapped)
        return rewrapped

    @abc.abstractmethod
    def rewrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """The handler to serve for `method` instead of `handler`."""
