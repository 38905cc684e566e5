"""Real servers the tests run beside the services: moto's S3 server and redis-server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis

from remotelog.dev.broker import free_port

S3_SERVER = Path(__file__).resolve().parent / "s3_server.py"


class S3Server:
    """tests/support/s3_server.py (moto plus fault injection) on a free loopback port;
    with `link` (its Link's settings, e.g. first_byte_ms=50), behind object storage's
    network, as `--link` puts it there."""

    def __init__(self, **link: float) -> None:
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in link.items()]
        self.process = subprocess.Popen(
            [sys.executable, str(S3_SERVER), *(["--link", *flags] if link else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"moto server did not start: {line!r}")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"

    def inject(self, **fault: Any) -> None:
        """The next matching requests fail as `fault` says (see s3_server.py)."""
        request = urllib.request.Request(
            f"{self.endpoint}/__faults__", data=json.dumps(fault).encode(), method="POST"
        )
        urllib.request.urlopen(request, timeout=10).read()

    def link(self, method: str = "GET", **settings: float) -> dict[str, Any] | None:
        """The link's settings and what it did (GET); POST: a new link of `settings`
        over the defaults, its counts from zero; DELETE: no link."""
        data = json.dumps(settings).encode() if method == "POST" else None
        request = urllib.request.Request(f"{self.endpoint}/__link__", data=data, method=method)
        with urllib.request.urlopen(request, timeout=10) as answer:
            found: dict[str, Any] | None = json.loads(answer.read())
        return found

    def pending_faults(self) -> list[dict[str, Any]]:
        """The faults injected that have not happened yet."""
        with urllib.request.urlopen(f"{self.endpoint}/__faults__", timeout=10) as answer:
            pending: list[dict[str, Any]] = json.loads(answer.read())
        return pending

    def clear_faults(self) -> None:
        request = urllib.request.Request(f"{self.endpoint}/__faults__", method="DELETE")
        urllib.request.urlopen(request, timeout=10).read()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class RedisServer:
    """redis-server (Debian's package, installed by `make setup`) on a fixed loopback port,
    without persistence: a kill loses what it held, as a crashed cache does."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; `make setup` installs it")
        self.binary, self.directory, self.port = binary, directory, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--dir", str(self.directory)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        for _ in range(500):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        client.close()
        return self

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
