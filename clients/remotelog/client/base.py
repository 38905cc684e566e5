"""What every typed client shares: its channel, deadlines, retries, typed errors.

Only UNAVAILABLE and DEADLINE_EXCEEDED are retried (with exponential backoff
and jitter, bounded by the call's deadline), and only for calls the caller
marks idempotent; every failure surfaces as a remotelog.core.errors exception.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor

from remotelog.client.bearer import bearer_interceptors
from remotelog.client.errors import from_rpc_error
from remotelog.core.backoff import ExponentialBackoff, retry_async
from remotelog.core.errors import DeadlineExceededError, RemoteLogError, should_retry_call
from remotelog.protocol.codecs import BulkCodec, passing_bytes
from remotelog.protocol.tracing import client_tracing

R = TypeVar("R")


@dataclass(frozen=True)
class ClientOptions:
    """Connection and call policy of a client."""

    timeout_s: float = 30.0
    max_message_bytes: int = 16 * 1024 * 1024
    backoff: ExponentialBackoff = field(
        default_factory=lambda: ExponentialBackoff(initial_ms=50, max_ms=2_000, jitter=0.2)
    )
    # gRPC's own reconnect backoff grows to 120 s; a service a restart brought
    # back should be found within seconds, so it is capped here.
    reconnect_backoff_max_ms: int = 2_000
    tls_root_certs_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # Sent as `authorization: Bearer <token>` to services with authorization.enabled.
    bearer_token: str = field(default="", repr=False)


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


def open_channel(target: str, options: ClientOptions) -> grpc.aio.Channel:
    channel_options = [
        ("grpc.max_send_message_length", options.max_message_bytes),
        ("grpc.max_receive_message_length", options.max_message_bytes),
        ("grpc.initial_reconnect_backoff_ms", min(100, options.reconnect_backoff_max_ms)),
        ("grpc.min_reconnect_backoff_ms", min(100, options.reconnect_backoff_max_ms)),
        ("grpc.max_reconnect_backoff_ms", options.reconnect_backoff_max_ms),
    ]
    interceptors = [*client_tracing(), *bearer_interceptors(options.bearer_token)]
    if options.tls_root_certs_file or options.tls_cert_file:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(options.tls_root_certs_file),
            private_key=_read(options.tls_key_file),
            certificate_chain=_read(options.tls_cert_file),
        )
        return grpc.aio.secure_channel(
            target, credentials, options=channel_options, interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options=channel_options, interceptors=interceptors)


def bulk_method(
    channel: grpc.aio.Channel,
    method: MethodDescriptor,
    deserialize: Callable[[bytes], Any] | None = None,
) -> Any:
    """A multicallable for `method` that sends already-encoded requests (bytes) as they
    are and, given `deserialize`, reads responses with it instead of protobuf (bulk_wire).
    """
    make = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[(method.client_streaming, method.server_streaming)]
    return make(
        f"/{method.containing_service.full_name}/{method.name}",
        request_serializer=passing_bytes(
            message_factory.GetMessageClass(method.input_type).SerializeToString
        ),
        response_deserializer=deserialize
        or message_factory.GetMessageClass(method.output_type).FromString,
        _registered_method=True,
    )


def bulk_stream(
    channel: grpc.aio.Channel,
    method: MethodDescriptor,
    codec: BulkCodec[Any],
    *,
    views: bool = False,
) -> grpc.aio.UnaryStreamMultiCallable:
    """A server-streaming method whose responses arrive as (data, integers), read by
    `codec` without protobuf's copies (with `views`, not copied at all: data is a
    memoryview of the message); any other shape is parsed by protobuf into the same."""
    return bulk_method(channel, method, codec.deserializer(views=views))


def _most_telling(error: RemoteLogError, previous: RemoteLogError | None) -> RemoteLogError:
    """The error to report when a call gives up.

    A retry cut short by the deadline says only "deadline exceeded"; the error
    that made us retry (an S3 outage the server already retried, say) is the
    one the caller can act on, so it wins.
    """
    if previous is not None and isinstance(error, DeadlineExceededError):
        return previous
    return error


class ServiceClient:
    """Base of the typed clients: owns its channel unless one is handed in."""

    def __init__(
        self,
        target: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        if (target is None) == (channel is None):
            raise ValueError("pass exactly one of target and channel")
        self.options = options or ClientOptions()
        self._owns_channel = channel is None
        self.channel = channel if channel is not None else open_channel(str(target), self.options)

    async def close(self) -> None:
        if self._owns_channel:
            await self.channel.close()

    async def __aenter__(self: Any) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def call_unary(
        self,
        method: Callable[..., Any],
        request: Any,
        *,
        timeout_s: float | None = None,
        idempotent: bool = True,
    ) -> Any:
        """Call a unary (or unary-request) stub method with deadline, retries and typed errors."""
        return await self.call_client_stream(
            method, lambda: request, timeout_s=timeout_s, idempotent=idempotent
        )

    async def call_client_stream(
        self,
        method: Callable[..., Any],
        requests: Callable[[], Any],
        *,
        timeout_s: float | None = None,
        idempotent: bool = True,
    ) -> Any:
        """Like call_unary; `requests()` makes the request (or a new request stream) per try."""
        deadline = time.monotonic() + (timeout_s or self.options.timeout_s)
        previous: list[RemoteLogError] = []

        async def attempt() -> Any:
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                return await method(requests(), timeout=remaining)
            except grpc.RpcError as exc:
                error = _most_telling(from_rpc_error(exc), previous[-1] if previous else None)
                previous.append(error)
                raise error from exc

        if not idempotent:
            return await attempt()
        return await retry_async(
            attempt, backoff=self.options.backoff, is_retriable=should_retry_call, deadline=deadline
        )

    async def call_retrying(
        self, attempt: Callable[[float], Awaitable[R]], *, timeout_s: float | None = None
    ) -> R:
        """`attempt(remaining seconds)` with the retries and deadline of a call, for
        requests that do not travel over gRPC (the segment store's short circuit)."""
        deadline = time.monotonic() + (timeout_s or self.options.timeout_s)
        return await retry_async(
            lambda: attempt(max(deadline - time.monotonic(), 0.001)),
            backoff=self.options.backoff,
            is_retriable=should_retry_call,
            deadline=deadline,
        )

    async def call_server_stream(
        self, method: Callable[..., Any], request: Any, *, timeout_s: float | None = None
    ) -> AsyncGenerator[Any, None]:
        """Iterate a server-streaming call; a failure mid-stream raises the typed error.

        A retriable failure before the first response (METADATA_NOT_READY, an
        unreachable server) is retried with backoff within the deadline: nothing
        was delivered yet, so the stream simply starts over.
        """
        deadline = time.monotonic() + (timeout_s or self.options.timeout_s)
        attempts = 0
        previous: RemoteLogError | None = None
        while True:
            call = method(request, timeout=max(deadline - time.monotonic(), 0.001))
            delivered = False
            try:
                async for response in call:
                    delivered = True
                    yield response
                return
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                pause = self.options.backoff.backoff_ms(attempts) / 1000
                if (
                    delivered
                    or not should_retry_call(error)
                    or time.monotonic() + pause >= deadline
                ):
                    raise _most_telling(error, previous) from exc
                previous = error
            finally:
                call.cancel()
            attempts += 1
            await asyncio.sleep(pause)
