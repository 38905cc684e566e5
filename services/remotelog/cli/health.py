"""`remotelog health ADDRESS [--service NAME]`: the gRPC health check, for compose
health checks, Kubernetes exec probes and scripts.

Exit 0 when the server (or the named service) answers SERVING; 1 with one line
saying what it answered, or why it could not be asked; 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import asyncio
import re

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.cli.errors import CliError
from remotelog.client.base import ClientOptions, open_channel
from remotelog.core.addresses import grpc_address
from remotelog.core.settings import ADDRESS_FORM
from remotelog.fetch.server import SERVICE_NAME as FETCH
from remotelog.metadata.server import SERVICE_NAME as METADATA
from remotelog.remover.server import SERVICE_NAME as REMOVER
from remotelog.scheduler.server import SERVICE_NAME as SCHEDULER
from remotelog.segmentstore.server import SERVICE_NAME as SEGMENT_STORE

# The short names `remotelog serve` takes, for the names the servers register.
HEALTH_NAMES = {
    "segment-store": SEGMENT_STORE,
    "metadata-manager": METADATA,
    "copy-scheduler": SCHEDULER,
    "remote-fetch": FETCH,
    "partition-remover": REMOVER,
}


def add_health_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = commands.add_parser(
        "health", help="ask a service's gRPC health check; exit 0 when it is SERVING"
    )
    health.add_argument("address", help="host:port or unix:/path of the service")
    health.add_argument(
        "--service",
        default="",
        help="a service name (segment-store, ...) or its gRPC name (default: the whole server)",
    )
    health.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the answer (default 5)"
    )
    health.add_argument("--tls-ca-file", default="", help="PEM CA bundle: check over TLS")
    health.add_argument("--tls-cert-file", default="", help="PEM client certificate (mutual TLS)")
    health.add_argument("--tls-key-file", default="", help="PEM key of --tls-cert-file")
    health.set_defaults(run=run_health)


def run_health(args: argparse.Namespace) -> int:
    if not re.fullmatch(ADDRESS_FORM[0], args.address):
        raise CliError(f"health: address {args.address!r} is not {ADDRESS_FORM[1]}")
    if (problem := grpc_address()(args.address)) is not None:
        raise CliError(f"health: address {args.address!r}: {problem}")
    if args.timeout <= 0:
        raise CliError(f"health: --timeout {args.timeout} must be more than 0 seconds")
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        raise CliError("health: --tls-cert-file and --tls-key-file go together")
    name = HEALTH_NAMES.get(args.service, args.service)
    options = ClientOptions(
        timeout_s=args.timeout,
        tls_root_certs_file=args.tls_ca_file,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
    )
    try:
        status = asyncio.run(_check(args.address, name, options))
    except OSError as exc:  # a TLS file that cannot be read
        raise CliError(f"health: {exc.filename or exc}: {exc.strerror or exc}") from None
    shown = f"{args.address} {args.service}".rstrip()
    print(f"{shown}: {status}")
    return 0 if status == "SERVING" else 1


async def _check(address: str, name: str, options: ClientOptions) -> str:
    """SERVING, NOT_SERVING, ..., or why the check could not be made."""
    async with open_channel(address, options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=name)
        try:
            response = await stub.Check(request, timeout=options.timeout_s, wait_for_ready=True)
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.NOT_FOUND:
                return f"no service named {name!r} here"
            if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"no answer within {options.timeout_s:g} s"
            return f"{error.code().name}: {error.details()}"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
