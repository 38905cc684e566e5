"""What is wrong with an address a setting or an argument names, said before anything
binds or connects: gRPC takes `0.0.0.0:99999` as port 34463 (modulo 65536), and a
client library refuses a bad port only with a traceback."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

MAX_PORT = 65535
UNIX_SCHEMES = ("unix:", "unix-abstract:")

AddressCheck = Callable[[str], str | None]


def host_port_problem(value: str, *, any_port: bool = False) -> str | None:
    """What is wrong with `host:port` (None: nothing). Port 0 ("any free port") only
    where `any_port`; an IPv6 host goes in brackets, as gRPC and Kafka write it."""
    host, colon, port = value.rpartition(":")
    if not colon or not host:
        return "expected host:port"
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            return f"host {host!r} opens a bracket it does not close"
    elif ":" in host:
        return f"an IPv6 host goes in brackets: [{host}]:{port}"
    if any(c.isspace() for c in host):
        return f"host {host!r} holds whitespace"
    return port_problem(port, any_port=any_port)


def port_problem(port: str, *, any_port: bool = False) -> str | None:
    if not (port.isascii() and port.isdigit()):
        return f"port {port!r} is not a number"
    lowest = 0 if any_port else 1
    if not lowest <= int(port) <= MAX_PORT:
        return f"port {int(port)} is outside {lowest}..{MAX_PORT}"
    return None


def grpc_address(*, any_port: bool = False, optional: bool = False) -> AddressCheck:
    """host:port, or a unix socket (unix:/path, unix-abstract:name)."""

    def problem(value: str) -> str | None:
        if optional and not value:
            return None
        if value.startswith(UNIX_SCHEMES):
            return None if value.partition(":")[2] else "names no socket"
        return host_port_problem(value, any_port=any_port)

    return problem


def host_port_list(value: str) -> str | None:
    """Kafka's bootstrap.servers: host:port[,host:port...]."""
    for server in value.split(","):
        problem = host_port_problem(server.strip())
        if problem is not None:
            return f"{server.strip()}: {problem}"
    return None


def url(*schemes: str) -> AddressCheck:
    """A URL with one of `schemes`, its port (if any) in 1..65535; empty allowed."""

    def problem(value: str) -> str | None:
        if not value:
            return None
        parts = urlsplit(value)
        if parts.scheme not in schemes:
            return f"expected a {' or '.join(s + '://' for s in schemes)} URL"
        try:
            port = parts.port  # None when the URL names none: the scheme's own
        except ValueError:  # not a number, or past 65535
            port = -1
        if port is not None and not 1 <= port <= MAX_PORT:
            return f"port {parts.netloc.rpartition(':')[2]!r} is not in 1..{MAX_PORT}"
        return None

    return problem
