"""`remotelog serve <service>` in a child process: health SERVING, then a clean SIGTERM stop."""

import signal
import subprocess
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.rpc.serve import serve_command


def serve_until_sigterm(service: str, config: Path, grpc_service: str) -> tuple[int, int, str]:
    """Start the service, ask its health, SIGTERM it.

    Returns (health status, exit code, what it printed after the serving line).
    """
    process = subprocess.Popen(serve_command(service, config), stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        marker = f"remotelog {service} serving on "
        assert marker in line, line
        with grpc.insecure_channel(line.split(marker, 1)[1].strip()) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service=grpc_service)
            status = health.Check(request, timeout=5).status
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        return status, code, process.stderr.read()
    finally:
        process.kill()
