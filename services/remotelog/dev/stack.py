"""`remotelog dev`: a broker and the five services as child processes.

Each service runs `remotelog serve <service> --config <file>`, the same code and
configuration keys as production, with its properties file and its log under the
data dir. The broker, holding the metadata topic, is Apache Kafka (KRaft, its log
dir under the data dir; tiering through the plugin, or beside a discovering copy
scheduler: MODES) or Tansu (memory storage); the segment store keeps
segments on the local filesystem; leases are in-process unless a Redis URL is
given. Children get their own session, so a Ctrl-C in the terminal reaches only
this process, which then stops them by pid in reverse order.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.core.version import __version__
from remotelog.dev.broker import Broker, EmbeddedBroker, free_port
from remotelog.dev.kafka_broker import (
    QUICK_RETENTION,
    KafkaBroker,
    plugin_jar,
    tiered_storage_properties,
)
from remotelog.rpc.serve import serve_command

# Start order: each service needs those before it (stop order is the reverse).
SERVICES = (
    "segment-store",
    "metadata-manager",
    "copy-scheduler",
    "remote-fetch",
    "partition-remover",
)
# A small metadata topic: one broker, one replica, little polling.
METADATA_TOPIC_PARTITIONS = 5
# Tiering shows up within a second of a segment rolling (Kafka's default: 30 s).
TASK_INTERVAL_MS = 1_000
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# What `--broker` takes: Apache Kafka from `make setup`'s jars, or Tansu.
BROKERS = ("kafka", "tansu")
# How segments reach the tier. plugin: Kafka's RemoteLogManager tiers through the
# remotelog plugin (topics with remote.storage.enable=true). sidecar: Kafka without
# remote storage, and the copy scheduler finds its partitions by itself (topics
# matching SIDECAR_TOPIC_PATTERN). simulated: the broker only holds the metadata
# topic; a client writes log directories as a broker would and assigns them to the
# copy scheduler, which also deletes them by local retention (the sidecar demo, tests).
MODES = ("plugin", "sidecar", "simulated")
# The sidecar tiers every topic but internal and compacted ones, which it never tiers.
SIDECAR_TOPIC_PATTERN = ".*"
# How often the sidecar looks at the cluster (its default is 10 s).
DISCOVERY_INTERVAL_MS = 1_000
# Unix sockets take paths of at most 107 bytes.
MAX_SOCKET_PATH = 100


class DevStackError(RuntimeError):
    """The stack could not start, or a child died; the message says which and why."""


@dataclass(frozen=True)
class DevConfig:
    data_dir: Path
    redis_url: str = ""
    broker: str = "kafka"  # one of BROKERS
    mode: str = "plugin"  # one of MODES; Tansu runs only "simulated"
    # 0: free loopback ports. Else the broker on base_port and the services on
    # base_port+1.. in SERVICES order (7300 gives the services their default ports).
    base_port: int = 0
    # Settings over the stack's own, by service: for example an S3 backend for the
    # segment store in place of the filesystem. Under "kafka", the broker's properties
    # (a plugin's as rsm.config.*, rlmm.config.*).
    overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass
class Child:
    """One running part of the stack, as the table shows it."""

    name: str
    address: str
    config: Path | None
    log: Path
    # What runs there, with its version.
    runs: str = f"remotelog {__version__}"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # The broker's, for the broker's row.
    broker_pid: int | None = None

    @property
    def pid(self) -> int | None:
        return self.broker_pid if self.process is None else self.process.pid


class DevStack:
    """Start with `start()` (or as a context manager), stop with `stop()`."""

    def __init__(self, config: DevConfig, broker: Broker | None = None) -> None:
        """`broker`: one not yet started, in place of the one `config.broker` names."""
        self.config = config
        self.data_dir = config.data_dir.resolve()
        self.children: list[Child] = []
        # Services whose port is chosen before the broker starts, which must know it.
        self.reserved_ports: dict[str, int] = {}
        self.broker = broker or self._new_broker()
        if self.broker.log_path is None:
            self.broker.log_path = self.data_dir / "logs" / "broker.log"

    def _new_broker(self) -> Broker:
        config = self.config
        if config.mode not in MODES:
            raise DevStackError(f"mode {config.mode!r}: not one of {', '.join(MODES)}")
        if config.broker == "tansu":
            if config.mode != "simulated":
                raise DevStackError(
                    f"Tansu cannot run the {config.mode} mode (it has neither the plugin nor "
                    "log directories): use --broker kafka"
                )
            return EmbeddedBroker(port=config.base_port)
        if config.broker != "kafka":
            raise DevStackError(f"broker {config.broker!r}: not one of {', '.join(BROKERS)}")
        properties: dict[str, str] = {}
        if config.mode == "sidecar":
            # The scheduler tells the remover of deleted topics: it must know where
            # the remover will listen before that starts.
            self._reserve_ports("partition-remover")
        if config.mode == "plugin":
            self._reserve_ports("segment-store", "metadata-manager")
            properties = {
                **tiered_storage_properties(
                    plugin_jar(),
                    f"127.0.0.1:{self.reserved_ports['segment-store']}",
                    f"127.0.0.1:{self.reserved_ports['metadata-manager']}",
                    task_interval_ms=TASK_INTERVAL_MS,
                    # The store is on this host: Kafka reads its files (file:// URLs),
                    # and the store reads the segments Kafka copies from their files.
                    storage_settings={
                        "fetch.urls.enabled": "true",
                        "fetch.file.url.roots": str(self.segments_dir),
                        "copy.method": "path",
                    },
                ),
                **QUICK_RETENTION,
            }
        properties.update(config.overrides.get("kafka", {}))
        return KafkaBroker(self.data_dir / "kafka", port=config.base_port, properties=properties)

    def _reserve_ports(self, *services: str) -> None:
        """Ports chosen now, for services another part must know before they start."""
        base = self.config.base_port
        for service in services:
            index = SERVICES.index(service) + 1
            self.reserved_ports[service] = base + index if base else free_port()

    def __enter__(self) -> DevStack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def addresses(self) -> dict[str, str]:
        """Each service's address, by name (the broker as `kafka`)."""
        return {child.name: child.address for child in self.children}

    @property
    def segments_dir(self) -> Path:
        return self.data_dir / "segments"

    def start(self) -> DevStack:
        for sub in ("logs", "config", "segments", "metadata-snapshots", "index-cache"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
        try:
            self.broker.start(timeout_s=STARTUP_TIMEOUT_S)
            assert self.broker.log_path is not None
            runs = self.broker.version
            if self.config.mode != "simulated":
                runs = f"{runs}, {self.config.mode} mode"
            self.children.append(
                Child(
                    "kafka",
                    self.broker.bootstrap_servers,
                    self.broker.config_path,
                    self.broker.log_path,
                    runs=runs,
                    broker_pid=self.broker.pid,
                )
            )
            for index, service in enumerate(SERVICES, start=1):
                port = self.config.base_port + index if self.config.base_port else 0
                port = self.reserved_ports.get(service, port)
                self.children.append(self._start_service(service, port))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_service(self, service: str, port: int) -> Child:
        path = self.data_dir / "config" / f"{service}.properties"
        properties = {"listen.address": f"127.0.0.1:{port}", **self._properties(service)}
        path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        log = self.data_dir / "logs" / f"{service}.log"
        child = Child(service, "", path, log)
        with log.open("ab") as out:
            start_at = out.tell()
            child.process = subprocess.Popen(
                serve_command(service, path),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.append(child)  # stopped with the rest if it fails to come up
        child.address = _served_address(child, start_at)
        _wait_serving(child)
        return self.children.pop()

    def _properties(self, service: str) -> dict[str, str]:
        """The settings each service gets beyond its defaults: where the others are."""
        return {**self._own_properties(service), **self.config.overrides.get(service, {})}

    def _log_dirs(self, key: str) -> dict[str, str]:
        """`key` set to Kafka's log directory, where the broker is Kafka's own."""
        if isinstance(self.broker, KafkaBroker):
            return {key: str(self.broker.data_dir)}
        return {}

    def _own_properties(self, service: str) -> dict[str, str]:
        data = self.data_dir
        socket = data / "store.sock"
        short_circuit = str(socket) if len(str(socket)) <= MAX_SOCKET_PATH else ""
        addresses = self.addresses
        clients = {
            "segment.store.address": addresses.get("segment-store", ""),
            "segment.store.short.circuit.socket.path": short_circuit,
            "metadata.manager.address": addresses.get("metadata-manager", ""),
        }
        metadata_topic = {
            "bootstrap.servers": self.broker.bootstrap_servers,
            "remote.log.metadata.topic.num.partitions": str(METADATA_TOPIC_PARTITIONS),
        }
        redis = {"redis.url": self.config.redis_url}
        return {
            "segment-store": {
                "storage.backend": "filesystem",
                "storage.root": str(self.segments_dir),
                "short.circuit.socket.path": short_circuit,
                "storage.filesystem.fetch.urls.enabled": "true",
                # The broker's log directory, for the plugin's copies by path.
                **self._log_dirs("copy.paths.allowed"),
            },
            "metadata-manager": {
                **metadata_topic,
                "remote.log.metadata.topic.replication.factor": "1",
                "remote.log.metadata.snapshot.dir": str(data / "metadata-snapshots"),
            },
            "copy-scheduler": {
                **clients,
                **redis,
                "remote.log.manager.task.interval.ms": str(TASK_INTERVAL_MS),
                **self._scheduler_mode_properties(),
            },
            "remote-fetch": {
                **clients,
                "remote.log.index.file.cache.dir": str(data / "index-cache"),
            },
            "partition-remover": {**clients, **metadata_topic, **redis},
        }[service]

    def _scheduler_mode_properties(self) -> dict[str, str]:
        if self.config.mode == "simulated":
            # No broker owns the simulated log directories: the scheduler frees them.
            return {"remote.log.manager.local.retention.enabled": "true"}
        if self.config.mode != "sidecar":
            return {}
        assert isinstance(self.broker, KafkaBroker)
        return {
            "remote.log.manager.discovery.enabled": "true",
            "remote.log.manager.discovery.interval.ms": str(DISCOVERY_INTERVAL_MS),
            "remote.log.manager.discovery.topic.pattern": SIDECAR_TOPIC_PATTERN,
            **self._log_dirs("log.dirs"),
            "bootstrap.servers": self.broker.bootstrap_servers,
            "broker.id": str(self.broker.node_id),
            "partition.remover.address": f"127.0.0.1:{self.reserved_ports['partition-remover']}",
        }

    def restart(self, service: str, *, crash: bool = False) -> Child:
        """One service, or the broker as `kafka`, stopped (SIGKILL with `crash`, else
        SIGTERM) and started again with the same config on the same address, so its
        clients find it where it was."""
        index = next((i for i, c in enumerate(self.children) if c.name == service), None)
        if index is not None and service == "kafka":
            if crash:
                self.broker.kill()
            else:
                self.broker.stop(timeout_s=STOP_TIMEOUT_S)
            self.broker.start(timeout_s=STARTUP_TIMEOUT_S)
            self.children[index].broker_pid = self.broker.pid
            return self.children[index]
        if index is None or self.children[index].process is None:
            raise DevStackError(f"{service}: not a service of this stack")
        process = self.children[index].process
        assert process is not None
        if crash:
            process.kill()
            process.wait()
        else:
            _terminate(process)
        port = int(self.children[index].address.rsplit(":", 1)[1])
        restarted = self._start_service(service, port)
        self.children[index] = restarted
        return restarted

    def dead(self) -> tuple[Child, int] | None:
        """The first child that exited, with its status; None while all run."""
        for child in self.children:
            code = self.broker.poll() if child.process is None else child.process.poll()
            if code is not None:
                return child, code
        return None

    def stop(self) -> None:
        """Every child by its pid, the last started first; the broker last."""
        while self.children:
            child = self.children.pop()
            if child.process is not None:
                _terminate(child.process)
        self.broker.stop()


def _served_address(child: Child, start_at: int) -> str:
    """The address in the child's `serving on` line (it chose its port when 0)."""
    marker = f"remotelog {child.name} serving on "
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    assert child.process is not None
    while time.monotonic() < deadline:
        with child.log.open("rb") as log:
            log.seek(start_at)
            for line in log.read().decode(errors="replace").splitlines():
                if marker in line:
                    return line.split(marker, 1)[1].strip()
        code = child.process.poll()
        if code is not None:
            raise DevStackError(died(child, code))
        time.sleep(0.05)
    raise DevStackError(f"{child.name} did not start within {STARTUP_TIMEOUT_S:.0f} s")


def _wait_serving(child: Child) -> None:
    """Until the child's gRPC health check (the server as a whole) answers SERVING."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    request = health_pb2.HealthCheckRequest(service="")
    serving = health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(child.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            with contextlib.suppress(grpc.RpcError):  # not answering yet: ask again
                if health.Check(request, timeout=2).status == serving:
                    return
            if time.monotonic() > deadline:
                raise DevStackError(f"{child.name} on {child.address} is not SERVING")
            time.sleep(0.05)


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def died(child: Child, code: int, lines: int = 20) -> str:
    """`<name> exited with status N`, then the last lines of its log."""
    try:
        tail = child.log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        tail = []
    status = f"signal {-code}" if code < 0 else f"status {code}"
    shown = "".join(f"\n  | {line}" for line in tail)
    return f"{child.name} exited with {status}; the end of {child.log}:{shown}"


@contextmanager
def signals_stop(handler: Callable[[], None]) -> Iterator[None]:
    """SIGINT and SIGTERM call `handler` while inside; the old handlers come back after."""
    previous = {
        signum: signal.signal(signum, lambda *_: handler())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run_until_stopped(stack: DevStack, poll_s: float = 0.2) -> int:
    """Wait for SIGINT / SIGTERM (stop all, 0) or a dead child (report it, stop the rest, 1)."""
    stopping: list[bool] = []
    with signals_stop(lambda: stopping.append(True)):
        while not stopping:
            dead = stack.dead()
            if dead is not None:
                print(f"remotelog dev: {died(*dead)}", file=sys.stderr, flush=True)
                stack.stop()
                return 1
            time.sleep(poll_s)
    stack.stop()
    return 0
