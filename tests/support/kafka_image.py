"""What the compose and Kubernetes tests check of the broker that loads the plugin:
the image deploy/kafka.Dockerfile builds, and the properties its KAFKA_* environment
gives Kafka."""

import shlex
from pathlib import Path
from xml.etree import ElementTree

from support.deploy import DEPLOY, ROOT
from support.kafka_cluster import pinned_kafka

KAFKA_DOCKERFILE = DEPLOY / "kafka.Dockerfile"
PLUGIN = ROOT / "clients" / "kafka-plugin"
POM = {"m": "http://maven.apache.org/POM/4.0.0"}


def kafka_properties(environment: dict[str, str]) -> dict[str, str]:
    """The broker's properties from its KAFKA_* environment, as the apache/kafka image
    maps them (`_` is `.`, `__` is `_`, `___` is `-`)."""
    found = {}
    for name, value in environment.items():
        if not name.startswith("KAFKA_"):
            continue
        key = name.removeprefix("KAFKA_").lower()
        key = key.replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")
        found[key] = str(value)
    return found


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return [tuple(line.split(maxsplit=1)) for line in lines]


def pinned_kafka_version() -> str:
    return pinned_kafka("kafka.version")


def plugin_jar_name() -> str:
    pom = ElementTree.parse(PLUGIN / "pom.xml").getroot()
    artifact = pom.findtext("m:artifactId", namespaces=POM)
    return f"{artifact}-{pom.findtext('m:version', namespaces=POM)}.jar"


def plugin_jar_in_image() -> str:
    """Where the image puts the plugin jar its build stage made."""
    (jar,) = [
        shlex.split(arguments)[-1]
        for instruction, arguments in dockerfile_instructions(KAFKA_DOCKERFILE)
        if instruction == "COPY" and "--from=plugin" in arguments
    ]
    return jar


def assert_tiers_through_the_plugin(
    properties: dict[str, str], segment_store: str, metadata_manager: str
) -> None:
    """Kafka loads both plugin classes from the jar in the image and calls the store and
    the metadata manager at the given addresses."""
    assert properties["remote.log.storage.system.enable"] == "true"
    for role in ("storage", "metadata"):
        name = properties[f"remote.log.{role}.manager.class.name"]
        assert (PLUGIN / "src/main/java" / (name.replace(".", "/") + ".java")).is_file()
        assert properties[f"remote.log.{role}.manager.class.path"] == plugin_jar_in_image()
    assert properties["rsm.config.segment.store.address"] == segment_store
    assert properties["rlmm.config.metadata.manager.address"] == metadata_manager
