"""What only the tests and benchmarks do with Apache Kafka, beside the product's
single-node KafkaBroker: a second node of a cluster, a wiped disk, JMX counts, the
versions the checkout pins, Kafka's own RLMM."""

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from remotelog.dev.broker import BrokerError
from remotelog.dev.kafka_broker import KafkaBroker, kafka_libs

CHECKOUT = Path(__file__).resolve().parents[2]
# Apache Kafka at each version jvm/pom.xml lists besides the pinned one (the plugin's
# matrix, the sidecar's 3.5), as `make setup` resolves them.
VERSIONS = CHECKOUT / ".tools" / "kafka-versions"
POM = CHECKOUT / "jvm" / "pom.xml"
KAFKA_RLMM = (
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
)


def kafka_libs_of(version: str) -> Path:
    """The folder of Apache Kafka `version`'s jars that `make setup` resolves."""
    return kafka_libs(str(VERSIONS / version / "libs"))


def pinned_kafka(name: str) -> str:
    """A property of jvm/pom.xml, where the checkout pins Apache Kafka: kafka.version,
    kafka.plugin.api.version, kafka.matrix.versions, kafka.sidecar.version."""
    namespace = "{http://maven.apache.org/POM/4.0.0}"
    found = ElementTree.parse(POM).find(f"{namespace}properties/{namespace}{name}")
    if found is None or not found.text:
        raise BrokerError(f"{POM} pins no {name}")
    return found.text.strip()


@dataclass
class KafkaNode(KafkaBroker):
    """A KafkaBroker that may be a broker-only node of another's cluster, lose its disk,
    and answer JMX."""

    # A broker-only node of `quorum`'s cluster (None: a cluster of its own, this node
    # its broker and its controller).
    quorum: KafkaBroker | None = None
    # A JMX port for Kafka's JmxTool (jmx()); 0: no JMX.
    jmx_port: int = 0

    def _port_fields(self) -> list[str]:
        fields = super()._port_fields()
        return fields if self.quorum is None else [f for f in fields if f != "controller_port"]

    def _reserved_ports(self) -> set[int]:
        # Chosen by the caller, then let go: the OS may offer it again for a listener.
        return {self.jmx_port} - {0}

    def _role_properties(self, advertised: str) -> dict[str, str]:
        if self.quorum is None:
            return super()._role_properties(advertised)
        controller = self.quorum
        return {
            "process.roles": "broker",
            "node.id": str(self.node_id),
            "controller.quorum.voters": (
                f"{controller.node_id}@{self.host}:{controller.controller_port}"
            ),
            "listeners": advertised,
        }

    def _format(self, jvm: list[str], config: Path) -> None:
        if self.quorum is not None:
            self.cluster_id = self.quorum.cluster_id
        super()._format(jvm, config)

    def _jvm_options(self) -> list[str]:
        if not self.jmx_port:
            return []
        port = self.jmx_port
        return [
            f"-Dcom.sun.management.jmxremote.port={port}",
            f"-Dcom.sun.management.jmxremote.rmi.port={port}",
            "-Dcom.sun.management.jmxremote.authenticate=false",
            "-Dcom.sun.management.jmxremote.ssl=false",
            f"-Djava.rmi.server.hostname={self.host}",
        ]

    def wipe(self) -> None:
        """Delete the stopped broker's data directory, as a lost disk does: the next
        start formats it again, into the same cluster."""
        if self._process is not None:
            raise BrokerError("stop the broker before wiping its data")
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def jmx(self, *object_names: str, attribute: str = "Count") -> dict[str, float]:
        """`attribute` of each MBean that the object names match (wildcards allowed), by
        name, read once through Kafka's JmxTool; the broker needs a `jmx_port`."""
        if not self.jmx_port:
            raise BrokerError("the broker was started without a jmx_port")
        url = f"service:jmx:rmi:///jndi/rmi://{self.host}:{self.jmx_port}/jmxrmi"
        command = self._tool("org.apache.kafka.tools.JmxTool")
        command += ["--jmx-url", url, "--one-time", "true"]
        for name in object_names:
            command += ["--object-name", name]
        command += ["--attributes", attribute, "--report-format", "properties"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0 or not done.stdout.startswith("time="):
            named = ", ".join(object_names)
            raise BrokerError(f"JmxTool {named} failed: {done.stderr.strip()[-500:]}")
        suffix = f":{attribute}"
        found = {}
        for line in done.stdout.splitlines()[1:]:  # name:attribute=value; names hold "=" too
            name, value = line.rsplit("=", 1)
            found[name.removesuffix(suffix)] = float(value)
        return found


def with_kafka_rlmm(
    properties: Mapping[str, str],
    *,
    metadata_partitions: int,
    replication_factor: int = 1,
    listener: str = "PLAINTEXT",
) -> dict[str, str]:
    """`properties` with Kafka's own TopicBasedRemoteLogMetadataManager in place of
    remotelog's: it writes `__remote_log_metadata` through the broker's `listener`, and
    remotelog's metadata manager may only read it (remote.log.metadata.read.only)."""
    kept = {
        key: value
        for key, value in properties.items()
        if not key.startswith(("remote.log.metadata.manager.", "rlmm.config."))
    }
    return {
        **kept,
        "remote.log.metadata.manager.class.name": KAFKA_RLMM,
        "remote.log.metadata.manager.listener.name": listener,
        "rlmm.config.remote.log.metadata.topic.num.partitions": str(metadata_partitions),
        "rlmm.config.remote.log.metadata.topic.replication.factor": str(replication_factor),
    }
