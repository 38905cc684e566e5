"""Assembly of a service's gRPC server: interceptor, health, listener, shutdown.

Every service builds its server here, so error mapping, health checks, TLS and
the shutdown order (health NOT_SERVING -> drain -> stop) are the same for all.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from remotelog.core.setting_paths import CERTIFICATE, PRIVATE_KEY, pem_file
from remotelog.core.settings import ServerSettings
from remotelog.protocol.tracing import server_tracing
from remotelog.rpc.authorization import AuthorizationInterceptor, Policy
from remotelog.rpc.errors import ErrorMappingInterceptor

T = TypeVar("T")


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health_aio.HealthServicer

    async def stop(self, grace_s: float) -> None:
        """Report NOT_SERVING so load balancers move away, then drain and stop."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


class RunningService(Generic[T]):
    """A started service: its gRPC server and the core (`app`) it serves.

    `stop` drains the server, then closes the core's backends.
    """

    def __init__(self, server: RunningServer, app: T, close: Callable[[], Awaitable[None]]):
        self.server = server
        self.app = app
        self._close = close

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_s: float) -> None:
        await self.server.stop(grace_s)
        await self._close()


async def start_service(
    settings: ServerSettings,
    app: T,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    resources: AsyncExitStack,
) -> RunningService[T]:
    """start_server for `app`, which owns `resources` from here on.

    A `start_*` function opens its clients and core inside an AsyncExitStack,
    each with its close pushed as it opens, and hands over `stack.pop_all()`:
    a failure at any step closes what was opened, in reverse order, and the
    running service closes them the same way after stop().
    """
    try:
        server = await start_server(settings, register, service_names)
    except BaseException:
        await resources.aclose()
        raise
    return RunningService(server, app, resources.aclose)


def server_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    if not settings.tls_cert_file:
        return None
    key = pem_file(settings.tls_key_file, "tls.key.file", PRIVATE_KEY, "private key")
    cert = pem_file(settings.tls_cert_file, "tls.cert.file", CERTIFICATE, "certificate")
    client_ca = (
        pem_file(settings.tls_client_ca_file, "tls.client.ca.file", CERTIFICATE, "certificate")
        if settings.tls_client_ca_file
        else None
    )
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def unix_socket_in_use(path: str, kind: int = socket.SOCK_STREAM) -> bool:
    """Whether a server answers on this unix socket already.

    gRPC unlinks whatever socket is at the path and binds anew: right for one
    left by a killed server, but a second server given the same path would
    silently take it from a live one. A TCP port in use fails the bind; so
    does this.
    """
    with socket.socket(socket.AF_UNIX, kind) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False  # none there, a stale socket, or not a socket (the bind says)
        return True


async def start_server(
    settings: ServerSettings,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
) -> RunningServer:
    """Start a server with `register`'s servicers on `settings.listen_address`.

    The bound port is returned, so tests listen on port 0.
    """
    # Tracing outermost (its span covers the rest), then the error mapping, which
    # also maps the authorization's refusals.
    interceptors: list[grpc.aio.ServerInterceptor] = [*server_tracing(), ErrorMappingInterceptor()]
    if settings.authorization_enabled:
        interceptors.append(AuthorizationInterceptor(Policy.of(settings)))
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_send_message_length", settings.grpc_max_message_bytes),
            ("grpc.max_receive_message_length", settings.grpc_max_message_bytes),
        ],
    )
    register(server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    credentials = server_credentials(settings)
    address = settings.listen_address
    if address.startswith("unix:") and unix_socket_in_use(
        address.removeprefix("unix:").removeprefix("//")
    ):
        raise OSError(f"listen.address: {settings.listen_address!r} is in use by a running server")
    try:
        if credentials is None:
            port = server.add_insecure_port(settings.listen_address)
        else:
            port = server.add_secure_port(settings.listen_address, credentials)
    except RuntimeError:
        port = 0  # grpcio raises where it used to return 0; either way, one clear line
    if port == 0:
        why = "address in use, or not host:port or unix:/path"
        if credentials is not None:
            why += ", or tls.cert.file and tls.key.file not a matching pair"
        raise OSError(f"listen.address: cannot listen on {settings.listen_address!r} ({why})")
    await server.start()
    for name in ("", *service_names):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, port, health)
