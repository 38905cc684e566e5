"""Real servers the tests run beside the services: moto's S3 server, GCS's emulator,
Azurite and redis-server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import redis

from remotelog.dev.broker import free_port

S3_SERVER = Path(__file__).resolve().parent / "s3_server.py"
CHECKOUT = Path(__file__).resolve().parents[2]
AZURITE = CHECKOUT / ".tools" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's well-known development account (the same in every Azurite).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def _wait_listening(process: subprocess.Popen[bytes], port: int, what: str) -> None:
    """Until `port` takes connections; RuntimeError if `process` ends first or 30 s pass."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{what} did not listen on {port} within 30 s")


class _Emulator:
    """An object store's emulator in its own process on a free loopback port."""

    def __init__(self, command: list[str], port: int, what: str) -> None:
        self.port = port
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        _wait_listening(self.process, port, what)

    def stop(self) -> None:
        # In memory, so nothing to lose: Azurite's node process does not end on SIGTERM.
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


class GcsEmulator(_Emulator):
    """gcp-storage-emulator (from PyPI), in memory: GCS's JSON and XML APIs."""

    def __init__(self) -> None:
        port = free_port()
        # The emulator serves one request at a time; a test's own listing while an
        # in-process store's upload is half sent would wait for the store, which waits
        # for the test. Threaded, it serves both, as GCS does.
        threaded = (
            "import http.server as s; s.HTTPServer = s.ThreadingHTTPServer; "
            "from gcp_storage_emulator.__main__ import main; main()"
        )
        command = [sys.executable, "-c", threaded, "start", "--host", "127.0.0.1"]
        command += ["--port", str(port), "--in-memory"]
        super().__init__(command, port, "gcp-storage-emulator")
        self.endpoint = f"http://127.0.0.1:{port}"

    def new_bucket(self, name: str) -> None:
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).read()

    def objects(self, bucket: str, prefix: str = "") -> dict[str, int]:
        query = urllib.parse.urlencode({"prefix": prefix})
        url = f"{self.endpoint}/storage/v1/b/{bucket}/o?{query}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            listing = json.loads(answer.read())
        return {item["name"]: int(item["size"]) for item in listing.get("items", [])}


class Azurite(_Emulator):
    """Azurite's blob service (from npm, installed by `make setup`), in memory."""

    def __init__(self) -> None:
        if not AZURITE.exists():
            raise RuntimeError(f"{AZURITE} is missing; `make setup` installs Azurite")
        port = free_port()
        command = [str(AZURITE), "--inMemoryPersistence", "--loose", "--skipApiVersionCheck"]
        command += ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--silent"]
        super().__init__(command, port, "azurite-blob")
        self.endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        self.connection_string = self.connection_string_of()

    def connection_string_of(self, endpoint: str | None = None) -> str:
        """The development account's connection string, at `endpoint` (default: its own)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint or self.endpoint};"
        )

    def _service(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def new_container(self, name: str) -> None:
        with self._service() as service:
            service.create_container(name)

    def objects(self, container: str, prefix: str = "") -> dict[str, int]:
        with self._service() as service:
            blobs = service.get_container_client(container).list_blobs(name_starts_with=prefix)
            return {blob.name: int(blob.size) for blob in blobs}

    def incomplete_uploads(self, container: str) -> list[str]:
        """Blobs with uncommitted blocks and nothing committed."""
        with self._service() as service:
            listed = service.get_container_client(container)
            committed = {blob.name for blob in listed.list_blobs()}
            every = listed.list_blobs(include=["uncommittedblobs"])
            return [blob.name for blob in every if blob.name not in committed]


class S3Server:
    """tests/support/s3_server.py (moto plus fault injection) on a free loopback port;
    with `link` (its Link's settings, e.g. first_byte_ms=50), behind object storage's
    network, as `--link` puts it there; with `upstream`, the faults and the link in
    front of that server (an emulator) instead of moto."""

    def __init__(self, upstream: str | None = None, **link: float) -> None:
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in link.items()]
        forwarding = ["--upstream", upstream] if upstream else []
        self.process = subprocess.Popen(
            [sys.executable, str(S3_SERVER), *forwarding, *(["--link", *flags] if link else [])],
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
