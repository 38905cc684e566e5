"""A bearer token on every call of a channel, for services that check roles."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc


def _with_token(details: grpc.aio.ClientCallDetails, header: tuple[str, str]) -> Any:
    metadata = [*(details.metadata or ()), header]
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class _Bearer:
    def __init__(self, token: str) -> None:
        # Kept only here: never logged, never in a repr.
        self._header = ("authorization", f"Bearer {token}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _Unary(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_token(details, self._header), request)


class _UnaryStream(_Bearer, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(_with_token(details, self._header), request)


class _StreamUnary(_Bearer, grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_unary(
        self, continuation: Callable[..., Any], details: Any, requests: Any
    ) -> Any:
        return await continuation(_with_token(details, self._header), requests)


class _StreamStream(_Bearer, grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: Any, requests: Any
    ) -> Any:
        return await continuation(_with_token(details, self._header), requests)


def bearer_interceptors(token: str) -> list[Any]:
    """Interceptors that send `authorization: Bearer <token>` with every kind of call."""
    if not token:
        return []
    return [kind(token) for kind in (_Unary, _UnaryStream, _StreamUnary, _StreamStream)]
