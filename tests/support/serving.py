"""`remotelog serve <service>` in a child process: health SERVING, then a clean SIGTERM stop;
or SIGTERM while it starts, or the moment it serves."""

import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.rpc.serve import serve_command


def serving_line(stream: IO[str], service: str) -> str:
    """The service's `serving on` line, read past the log lines before it (its
    effective configuration, warnings while it starts)."""
    marker = f"remotelog {service} serving on "
    read = []
    for line in stream:
        if marker in line:
            return line
        read.append(line)
    raise AssertionError(f"{service} exited before serving: {''.join(read)}")


def serving_address(stream: IO[str], service: str) -> str:
    return serving_line(stream, service).split(" serving on ", 1)[1].strip()


def serve_until_sigterm(service: str, config: Path, grpc_service: str) -> tuple[int, int, str]:
    """Start the service, ask its health, SIGTERM it.

    Returns (health status, exit code, what it printed after the serving line).
    """
    process = subprocess.Popen(serve_command(service, config), stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        with grpc.insecure_channel(serving_address(process.stderr, service)) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service=grpc_service)
            status = health.Check(request, timeout=5).status
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        return status, code, process.stderr.read()
    finally:
        process.kill()


def sigterm_handled(pid: int) -> bool:
    """The process has a handler for SIGTERM (SigCgt in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def sigterm_while_starting(service: str, config: Path, timeout_s: float = 30) -> tuple[int, str]:
    """Start the service, SIGTERM it as soon as it handles the signal (before it serves).

    Returns (exit code, everything it printed to stderr).
    """
    process = subprocess.Popen(serve_command(service, config), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not sigterm_handled(process.pid):
            assert process.poll() is None, "exited before handling SIGTERM"
            assert time.monotonic() < deadline, "never handled SIGTERM"
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        _, printed = process.communicate(timeout=timeout_s)
        return process.returncode, printed
    finally:
        process.kill()


def sigterm_on_serving_line(service: str, config: Path) -> tuple[int, str]:
    """Start the service and SIGTERM it the moment its serving line is read.

    Returns (exit code, what it printed after the serving line).
    """
    process = subprocess.Popen(serve_command(service, config), stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        serving_line(process.stderr, service)
        process.send_signal(signal.SIGTERM)
        _, printed = process.communicate(timeout=30)
        return process.returncode, printed
    finally:
        process.kill()


def serve_in_background(service: str, config: Path, log: Path, timeout_s: float = 60):
    """`remotelog serve <service>` as a child process logging to `log`, once it serves:
    for a test that kills it (a pipe nobody reads could stall it first)."""
    with log.open("w") as out:
        process = subprocess.Popen(serve_command(service, config), stderr=out, text=True)
    deadline = time.monotonic() + timeout_s
    while f"remotelog {service} serving on " not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{service} did not serve: {log.read_text()}")
        time.sleep(0.05)
    return process
