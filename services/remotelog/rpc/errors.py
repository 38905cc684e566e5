"""The one place domain errors become gRPC statuses.

A RemoteLogError becomes its status code with a `google.rpc.Status` in the
`grpc-status-details-bin` trailer holding an `ErrorInfo` (domain "remotelog",
reason from the ErrorReason enum, the error's metadata) and, for bad input, a
`BadRequest` naming the field. Anything else is logged with its traceback and
becomes INTERNAL without internal detail.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from remotelog.core.errors import ERROR_DOMAIN, InvalidArgumentError, RemoteLogError
from remotelog.rpc.handlers import Behavior, RewrappingInterceptor, rewrapped

log = logging.getLogger(__name__)
STATUS_DETAILS_KEY = "grpc-status-details-bin"


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_for(exc: BaseException, method: str = "") -> tuple[grpc.StatusCode, status_pb2.Status]:
    """The gRPC code and rich status describing `exc`."""
    if isinstance(exc, RemoteLogError):
        error, message = exc, exc.message
    else:
        incident = uuid.uuid4().hex[:12]
        log.error("unexpected error in %s (incident %s)", method, incident, exc_info=exc)
        error = RemoteLogError(f"internal error (incident {incident})")
        message = error.message
    code = grpc.StatusCode[error.code]
    details = [
        _pack(
            error_details_pb2.ErrorInfo(
                reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata
            )
        )
    ]
    if isinstance(error, InvalidArgumentError):
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=error.field, description=error.detail
        )
        details.append(_pack(error_details_pb2.BadRequest(field_violations=[violation])))
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)
    return code, status


async def abort_with(
    context: grpc.aio.ServicerContext[Any, Any], exc: BaseException, method: str
) -> None:
    code, status = status_for(exc, method)
    await context.abort(
        code, status.message, trailing_metadata=((STATUS_DETAILS_KEY, status.SerializeToString()),)
    )


Deserializer = Callable[[bytes], Any]


def _decoding(deserialize: Deserializer | None, method: str) -> Deserializer:
    """`deserialize`, its failure an InvalidArgumentError naming the method.

    gRPC runs a handler's deserializer before any interceptor's code and answers
    its failure with UNKNOWN and no details; so the handler is given raw bytes
    and the request is parsed here, inside the mapping of errors.
    """
    if deserialize is None:
        return lambda raw: raw

    def decoded(raw: bytes) -> Any:
        try:
            return deserialize(raw)
        except RemoteLogError:
            raise
        except Exception as exc:
            raise InvalidArgumentError(
                "request", f"not a valid {method} request message ({type(exc).__name__})"
            ) from None

    return decoded


def _converting(behavior: Behavior, convert: Callable[[Any], Any]) -> Behavior:
    """`behavior` given `convert(raw)` for the raw request (or request iterator) gRPC
    passes; an async generator stays one, so _wrap_stream still sees a stream."""
    if inspect.isasyncgenfunction(behavior):

        async def stream(raw: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            async with contextlib.aclosing(behavior(convert(raw), context)) as items:
                async for item in items:
                    yield item

        return stream

    async def call(raw: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return await behavior(convert(raw), context)

    return call


def _parsed_stream(deserialize: Deserializer) -> Callable[[AsyncIterator[bytes]], Any]:
    # The servicer's iteration raises the InvalidArgumentError of a bad message
    # where it reached it; a servicer that drains after an error keeps draining.
    async def requests(raw: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        async for message in raw:
            yield deserialize(message)

    return requests


def _wrap_call(behavior: Behavior, method: str) -> Behavior:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await behavior(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort_with(context, exc, method)

    return call


def _wrap_stream(behavior: Behavior, method: str) -> Behavior:
    if not inspect.isasyncgenfunction(behavior):
        # A streaming handler that writes through context.write() is a coroutine.
        return _wrap_call(behavior, method)

    async def stream(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        try:
            async with contextlib.aclosing(behavior(request, context)) as items:
                async for item in items:
                    yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort_with(context, exc, method)

    return stream


class ErrorMappingInterceptor(RewrappingInterceptor):
    """Maps exceptions raised by any servicer method to rich gRPC statuses."""

    def rewrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        deserialize = _decoding(handler.request_deserializer, method)
        stream_of = _parsed_stream(deserialize)

        def wrap(behavior: Behavior, requests_stream: bool, responses_stream: bool) -> Behavior:
            parsed = _converting(behavior, stream_of if requests_stream else deserialize)
            return (_wrap_stream if responses_stream else _wrap_call)(parsed, method)

        # Requests arrive as bytes: they are parsed inside the mapping (_decoding).
        return rewrapped(
            handler,
            wrap,
            request_deserializer=None,
            response_serializer=handler.response_serializer,
        )
