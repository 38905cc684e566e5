"""A single-node Apache Kafka broker (KRaft, combined broker and controller) from jars.

The jars: `KAFKA_JARS_DIR` (not a REMOTELOG_* name: the services read those as
their settings, and refuse unknown ones), else a checkout's `.tools/kafka/libs`
(`make setup`), else those kafka-jars.lock names, fetched once into the user's
cache (kafka_jars). The broker keeps its configuration,
its log and its data under one directory, so `start()` after `stop()` or
`kill()` is a restart from its own log dir on the same ports.
"""

from __future__ import annotations

import base64
import logging
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remotelog.dev.broker import BrokerError, BrokerProcess, free_ports
from remotelog.dev.kafka_jars import (
    MAVEN_CENTRAL,
    PLUGIN_JARS,
    REPOSITORY_ENV,
    KafkaLock,
    cached_kafka_jars,
    kafka_cache,
    packaged_plugin_jar,
)

LIBS_ENV = "KAFKA_JARS_DIR"
# More JVM options for the broker and Kafka's tools, read as Kafka's own scripts read it.
OPTS_ENV = "KAFKA_OPTS"
PLUGIN_ENV = "KAFKA_PLUGIN_JAR"
PLUGIN_PACKAGE = "dev.remotelog.kafka"
# The checkout this module may sit in (services/remotelog/dev/kafka_broker.py): its
# `make setup` folders are used where they exist.
_CHECKOUT = Path(__file__).resolve().parents[3]
_CHECKOUT_LIBS = _CHECKOUT / ".tools" / "kafka" / "libs"
_CHECKOUT_PLUGIN = _CHECKOUT / "clients" / "kafka-plugin" / "target"
# Enough for the tests' topics and the demo; several brokers fit on a 2-core, 24 GiB machine.
DEFAULT_HEAP = "512m"
LOG_TAIL_LINES = 30
# Lines of a failed start's first error shown: its message and the exception's.
ERROR_LINES = 4

_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def kafka_libs(
    configured: str | None = None, announce: Callable[[str], None] = lambda _: None
) -> Path:
    """The folder of Apache Kafka's jars: `configured`, else LIBS_ENV's, else the
    checkout's, else the lock's in the user's cache (fetched now if need be, told to
    `announce`); or a BrokerError saying how to get them."""
    configured = configured or os.environ.get(LIBS_ENV)
    if not configured:
        if any(_CHECKOUT_LIBS.glob("kafka_2.13-*.jar")):
            return _CHECKOUT_LIBS
        return cached_kafka_jars(
            KafkaLock.read(),
            kafka_cache(),
            maven=shutil.which("mvn"),
            repository=os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL,
            announce=announce,
        )
    libs = Path(configured)
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise BrokerError(
            f"Apache Kafka's jars are not in {LIBS_ENV}={configured}: set it to a folder "
            "of kafka_2.13 and its dependencies, or unset it to fetch them"
        )
    return libs


def kafka_version(libs: Path) -> str:
    """The version of the broker jar in `libs` (kafka_2.13-4.4.0.jar: 4.4.0)."""
    jar = min(libs.glob("kafka_2.13-*.jar"))
    return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")


def plugin_jar() -> Path:
    """The remotelog plugin's shaded jar: PLUGIN_ENV's, else the one this installation
    carries, else a checkout's build; or a BrokerError saying how to get one."""
    configured = os.environ.get(PLUGIN_ENV)
    if configured:
        jar = Path(configured)
        if jar.is_file():
            return jar
        raise BrokerError(f"{PLUGIN_ENV}={configured}: no such file")
    packaged = packaged_plugin_jar()
    if packaged is not None:
        return packaged
    built = sorted(_CHECKOUT_PLUGIN.glob(PLUGIN_JARS))
    if not built:
        raise BrokerError(
            "this remotelog carries no Kafka plugin jar (an editable install): run "
            f"`make setup` in its checkout to build it into {_CHECKOUT_PLUGIN}, or set "
            f"{PLUGIN_ENV} to the jar"
        )
    return built[-1]


def tiered_storage_properties(
    jar: Path,
    segment_store_address: str,
    metadata_manager_address: str,
    *,
    task_interval_ms: int = 30_000,
    storage_settings: Mapping[str, str] | None = None,
    isolated: bool = True,
    **plugin_settings: str,
) -> dict[str, str]:
    """A broker's properties that make it tier through remotelog: Kafka's RemoteLogManager
    with the plugin as its RemoteStorageManager and RemoteLogMetadataManager. Each of
    `plugin_settings` (e.g. client.tls.ca.file, with dots) goes to both plugins; each of
    `storage_settings` (e.g. fetch.urls.enabled) to the storage manager alone, as the
    metadata manager plugin warns of a key it does not know.

    `isolated`: Kafka loads the plugin from `jar` by a class loader of its own
    (remote.log.*.class.path). Else the jar must be on the broker's class path
    (KafkaBroker.class_path), where a Kafka 4.1+ broker also hands the plugin its own
    metrics registry, which it wraps away from an isolated plugin."""
    rsm = {
        "segment.store.address": segment_store_address,
        # Its own lookups of the segment after one being read (NextSegments).
        "metadata.manager.address": metadata_manager_address,
        **plugin_settings,
        **(storage_settings or {}),
    }
    rlmm = {"metadata.manager.address": metadata_manager_address, **plugin_settings}
    class_paths = {
        "remote.log.storage.manager.class.path": str(jar),
        "remote.log.metadata.manager.class.path": str(jar),
    }
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": f"{PLUGIN_PACKAGE}.RemotelogStorageManager",
        "remote.log.metadata.manager.class.name": f"{PLUGIN_PACKAGE}.RemotelogMetadataManager",
        **(class_paths if isolated else {}),
        "remote.log.manager.task.interval.ms": str(task_interval_ms),
        **{f"rsm.config.{key}": value for key, value in rsm.items()},
        **{f"rlmm.config.{key}": value for key, value in rlmm.items()},
    }


# Retention as a demo or a test wants it: checked every second from the start (Kafka
# waits 30 s after start-up by default), deleted files gone at once (not a minute later).
QUICK_RETENTION = {
    "log.retention.check.interval.ms": "1000",
    "log.initial.task.delay.ms": "0",
    "log.segment.delete.delay.ms": "0",
}


def kafka_opts() -> list[str]:
    """The JVM options KAFKA_OPTS adds (kafka-run-class.sh appends it to every command)."""
    return shlex.split(os.environ.get(OPTS_ENV, ""))


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).is_file():
        raise BrokerError(
            "Apache Kafka needs Java 17 or newer: apt-get install openjdk-17-jre-headless"
        )
    return java


def random_cluster_id() -> str:
    """A cluster id as Kafka makes one: a random UUID, base64url without padding, never
    starting with "-" (Kafka's Uuid.randomUuid: a command line would read it as a flag)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


@dataclass(frozen=True)
class BrokerTls:
    """PEM files for the SSL and SASL_SSL listeners: the broker's certificate and
    PKCS#8 key, and the CA that signs client certificates (the SSL listener
    requires one; SASL_SSL authenticates by SASL instead)."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True)
class SaslUsers:
    """Users of the SASL_SSL listener, by mechanism."""

    scram_sha_512: Mapping[str, str] = field(default_factory=dict)
    plain: Mapping[str, str] = field(default_factory=dict)


@dataclass
class KafkaBroker(BrokerProcess):
    """One KRaft broker on loopback ports; `start()` again after `stop()` restarts it."""

    # A controlled shutdown moves leadership and flushes; give it time before SIGKILL.
    stop_grace_s = 30.0

    directory: Path
    # Kafka's jars: a folder of kafka_2.13 and its dependencies (default: kafka_libs()).
    libs: Path | None = None
    # Jars after Kafka's on the broker's class path (a plugin not isolated by Kafka).
    class_path: tuple[Path, ...] = ()
    host: str = "127.0.0.1"
    port: int = 0
    heap: str = DEFAULT_HEAP
    # With TLS: an SSL listener (client certificates required) and a SASL_SSL one.
    tls: BrokerTls | None = None
    sasl_users: SaslUsers = field(default_factory=SaslUsers)
    # Broker properties over the defaults below (e.g. log.retention.hours).
    properties: Mapping[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    ssl_port: int = 0
    sasl_ssl_port: int = 0
    controller_port: int = 0
    node_id: int = 1
    # Set at the first format (a random id).
    cluster_id: str = ""
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # Where this run's lines begin in the log: a failure shows only those.
    _log_start: int = field(default=0, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ssl_bootstrap_servers(self) -> str:
        return f"{self.host}:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        return f"{self.host}:{self.sasl_ssl_port}"

    @property
    def version(self) -> str:
        return f"Apache Kafka {kafka_version(self.jars)}"

    @property
    def jars(self) -> Path:
        return kafka_libs(str(self.libs) if self.libs else None)

    @property
    def pid(self) -> int | None:
        """The broker's JVM, while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def start(self, timeout_s: float = 60.0) -> KafkaBroker:
        if self._process is not None:
            raise BrokerError(f"broker already running (pid {self._process.pid})")
        java, libs = java_binary(), self.jars
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:
            self.log_path = self.directory / "broker.log"
        self._choose_ports()
        config = self.config_path
        config.write_text("".join(f"{k}={v}\n" for k, v in self._server_properties().items()))
        log4j = self.directory / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log_path))
        jvm = [java, f"-Xmx{self.heap}", "-Xss1m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
        jvm += [
            f"-Dlog4j2.configurationFile={log4j}",
            *kafka_opts(),
            *self._jvm_options(),
            "-cp",
            self._class_path(libs),
        ]
        if not (self.data_dir / "meta.properties").exists():
            self._format(jvm, config)
        with self.log_path.open("ab") as out:
            self._log_start = out.tell()
            self._process = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_until_ready(timeout_s)
        except BaseException:
            self.kill()
            raise
        return self

    def _class_path(self, libs: Path) -> str:
        return os.pathsep.join([str(libs / "*"), *map(str, self.class_path)])

    def _port_fields(self) -> list[str]:
        """The fields of the ports this node listens on."""
        fields = ["port", "controller_port"]
        return fields + (["ssl_port", "sasl_ssl_port"] if self.tls is not None else [])

    def _reserved_ports(self) -> set[int]:
        """Ports a listener must not take (chosen elsewhere, for other uses)."""
        return set()

    def _jvm_options(self) -> list[str]:
        return []

    def _choose_ports(self) -> None:
        """Free ports once, all distinct (Kafka refuses two listeners on one port); a
        restart keeps them, so clients find the broker where it was."""
        fields = self._port_fields()
        missing = [name for name in fields if not getattr(self, name)]
        kept = ({getattr(self, name) for name in fields} | self._reserved_ports()) - {0}
        chosen = free_ports(len(missing), self.host)
        while kept & set(chosen):
            chosen = free_ports(len(missing), self.host)
        for name, port in zip(missing, chosen, strict=True):
            setattr(self, name, port)

    def _server_properties(self) -> dict[str, str]:
        listeners = {"PLAINTEXT": self.port}
        if self.tls is not None:
            listeners |= {"SSL": self.ssl_port, "SASL_SSL": self.sasl_ssl_port}
        advertised = ",".join(f"{name}://{self.host}:{port}" for name, port in listeners.items())
        protocols = {name: name for name in listeners} | {"CONTROLLER": "PLAINTEXT"}
        properties = {
            **self._role_properties(advertised),
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocols.items()),
            "log.dirs": str(self.data_dir),
            # One node: every internal topic has one replica.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # A group's first member need not wait 3 s for others (tests, the demo).
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.flush.offset.checkpoint.interval.ms": "1000",
            **(self._tls_properties() if self.tls is not None else {}),
        }
        return {**properties, **self.properties}

    def _role_properties(self, advertised: str) -> dict[str, str]:
        """Broker and controller in one node."""
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.controller_port}",
            "listeners": f"{advertised},CONTROLLER://{self.host}:{self.controller_port}",
        }

    def _tls_properties(self) -> dict[str, str]:
        assert self.tls is not None
        # Kafka reads a PEM keystore as one file: the private key, then the certificate.
        keystore = self.directory / "keystore.pem"
        keystore.write_bytes(self.tls.key.read_bytes() + self.tls.cert.read_bytes())
        keystore.chmod(0o600)
        users = self.sasl_users
        plain_users = " ".join(f'user_{name}="{secret}"' for name, secret in users.plain.items())
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca),
            "ssl.endpoint.identification.algorithm": "",
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            ),
        }

    def _format(self, jvm: list[str], config: Path) -> None:
        """Format the log dir into the cluster (a random id for a new one), SCRAM users
        included."""
        self.cluster_id = self.cluster_id or random_cluster_id()
        command = [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}"]
        command += ["-c", str(config)]
        for name, secret in self.sasl_users.scram_sha_512.items():
            command += ["--add-scram", f'SCRAM-SHA-512=[name="{name}",password="{secret}"]']
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip().splitlines()[-LOG_TAIL_LINES:]
            raise BrokerError(
                f"formatting {self.data_dir} failed (status {done.returncode}):"
                + "".join(f"\n  | {line}" for line in output)
            )

    def _wait_until_ready(self, timeout_s: float) -> None:
        """Until the broker lists itself (its node id) in a metadata answer on its
        PLAINTEXT listener."""
        from confluent_kafka.admin import AdminClient

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": logging.getLogger(__name__),
            "socket.connection.setup.timeout.ms": 1000,
            "reconnect.backoff.max.ms": 200,
        }
        admin = AdminClient(config)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.poll()
            if code is not None:
                raise BrokerError(f"kafka exited with status {code}{self.log_tail()}")
            try:
                if self.node_id in admin.list_topics(timeout=1).brokers:
                    return
            except Exception:
                time.sleep(0.1)
        raise BrokerError(
            f"kafka did not answer metadata on {self.bootstrap_servers} within "
            f"{timeout_s:.0f} s{self.log_tail()}"
        )

    def _tool(self, main_class: str) -> list[str]:
        """The command line of one of Kafka's tools from the broker's jars."""
        return [java_binary(), "-Xmx128m", *kafka_opts(), "-cp", str(self.jars / "*"), main_class]

    def list_offsets(self, topic: str, time: str) -> dict[int, int]:
        """Each partition's offset for ListOffsets `time` (earliest, latest, earliest-local
        (-4), latest-tiered (-5), ...), asked by Kafka's own GetOffsetShell: librdkafka
        refuses to send the tiered-storage ones."""
        command = self._tool("org.apache.kafka.tools.GetOffsetShell")
        command += ["--bootstrap-server", self.bootstrap_servers, "--topic", topic, "--time", time]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise BrokerError(f"GetOffsetShell --time {time} failed: {done.stderr.strip()}")
        found = {}
        for line in done.stdout.split():  # topic:partition:offset
            _, partition, offset = line.rsplit(":", 2)
            found[int(partition)] = int(offset) if offset else -1
        return found

    def run_log(self) -> list[str]:
        """The lines this run (the last start) wrote to the broker's log."""
        if self.log_path is None or not self.log_path.exists():
            return []
        with self.log_path.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace").splitlines()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """This run's first ERROR line (the cause, before the shutdown's lines bury it)
        and the end of its log, indented, for an error message."""
        run = self.run_log()
        if not run:
            return ""
        first = next((n for n, line in enumerate(run) if "] ERROR " in line), None)
        cause = ""
        if first is not None and first < len(run) - lines:
            shown = "".join(f"\n  | {line}" for line in run[first : first + ERROR_LINES])
            cause = f"; its first error:{shown}"
        tail = "".join(f"\n  | {line}" for line in run[-lines:])
        return f"{cause}; the end of {self.log_path}:{tail}"
