"""Run one service in the foreground until SIGTERM or SIGINT, then shut it down in order.

Order on a signal: health NOT_SERVING (load balancers move away), in-flight
calls get `shutdown.grace.ms` to finish, the server stops, backends close,
telemetry is flushed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol

from remotelog.core.settings import ServerSettings
from remotelog.rpc.telemetry import configure_telemetry


class Stoppable(Protocol):
    @property
    def port(self) -> int: ...

    async def stop(self, grace_s: float) -> None: ...


async def serve_until_signal(
    name: str,
    settings: ServerSettings,
    start: Callable[[], Awaitable[Stoppable]],
    *,
    ready_file: Path | None = None,
    while_serving: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> None:
    """`while_serving` is entered once the service has started and left before it stops:
    the process's own tuning (see remotelog.process), chosen by whoever owns the process."""
    # Before anything starts: an orchestrator may stop a process it has just started,
    # and the default action would leave what had started unclosed.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    telemetry = configure_telemetry(name, settings)
    try:
        service = await _started_unless_stopped(start, stop)
        if service is None:
            _announce(f"remotelog {name} stopped while starting")
            return
        try:
            with while_serving():
                address = served_address(settings.listen_address, service.port)
                _announce(f"remotelog {name} serving on {address}")
                if telemetry.metrics_port is not None:
                    metrics_at = served_address(
                        settings.metrics_listen_address, telemetry.metrics_port
                    )
                    _announce(f"remotelog {name} metrics on {metrics_at}")
                if ready_file is not None:
                    write_ready_file(ready_file, name, address)
                await stop.wait()
                _announce(f"remotelog {name} shutting down")
        finally:
            if ready_file is not None:
                ready_file.unlink(missing_ok=True)
            await service.stop(settings.shutdown_grace_ms / 1000)
    finally:
        telemetry.shutdown()


async def _started_unless_stopped(
    start: Callable[[], Awaitable[Stoppable]], stop: asyncio.Event
) -> Stoppable | None:
    """The started service, or None when `stop` was set first: the start is then
    cancelled, which closes what it had opened (each starter's AsyncExitStack)."""
    starting = asyncio.ensure_future(start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not stop.is_set():
        return starting.result()
    starting.cancel()
    try:
        service = await starting
    except asyncio.CancelledError:
        return None
    await service.stop(0)  # it had finished starting as the signal came
    return None


def write_ready_file(path: Path, name: str, address: str) -> None:
    """`{"service", "address", "pid"}` at `path`, whole or not at all (temp, then rename),
    for a supervisor that starts a service on port 0 and must learn where it listens."""
    ready = {"service": name, "address": address, "pid": os.getpid()}
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(ready) + "\n")
    temp.replace(path)


def _announce(line: str) -> None:
    """One line on stderr in a single write: print() writes the text and its newline
    apart, and a log record from another thread (librdkafka's) could land between them,
    gluing itself to the address a parent reads from the serving line."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def served_address(listen_address: str, port: int) -> str:
    """Where clients reach a server bound to `listen_address`: host:port with the port
    bound (for port 0, the one chosen), or the unix socket as configured."""
    if listen_address.startswith(("unix:", "unix-abstract:")):
        return listen_address
    return f"{listen_address.rsplit(':', 1)[0]}:{port}"


def serve_command(service: str, config: Path) -> list[str]:
    """The command line that serves `service` with `config` under this interpreter.

    For whatever starts services as child processes (the dev stack, tests,
    benchmarks); they print `remotelog <service> serving on <address>` (see served_address).
    """
    return [sys.executable, "-m", "remotelog.cli.main", "serve", service, "--config", str(config)]
