"""What the compose, Kubernetes and image tests check of deploy/Dockerfile (its
stages, among them the `kafka` target that loads the plugin) and of the properties
the Kafka image's KAFKA_* environment gives Kafka."""

import re
import shlex
from pathlib import Path
from xml.etree import ElementTree

from support.deploy import DEPLOY, ROOT
from support.kafka_cluster import pinned_kafka

DOCKERFILE = DEPLOY / "Dockerfile"
Instruction = tuple[str, str]
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


def instructions(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in joined.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def dockerfile_stages(path: Path = DOCKERFILE) -> tuple[list[Instruction], list[list[Instruction]]]:
    """The instructions before the first FROM, and each stage's from its FROM on."""
    preamble: list[Instruction] = []
    stages: list[list[Instruction]] = []
    for instruction in instructions(path.read_text()):
        if instruction[0] == "FROM":
            stages.append([])
        (stages[-1] if stages else preamble).append(instruction)
    return preamble, stages


def stage(name: str, path: Path = DOCKERFILE) -> list[Instruction]:
    """The stage `FROM ... AS name`."""
    (found,) = [s for s in dockerfile_stages(path)[1] if s[0][1].endswith(f" AS {name}")]
    return found


def copied_from(name: str, instructions: list[Instruction]) -> list[list[str]]:
    """The COPY --from=`name` instructions' words, without the flag."""
    return [
        shlex.split(arguments)[1:]
        for instruction, arguments in instructions
        if instruction == "COPY" and arguments.startswith(f"--from={name} ")
    ]


def pinned_kafka_version() -> str:
    return pinned_kafka("kafka.version")


def plugin_jar_name() -> str:
    pom = ElementTree.parse(PLUGIN / "pom.xml").getroot()
    artifact = pom.findtext("m:artifactId", namespaces=POM)
    return f"{artifact}-{pom.findtext('m:version', namespaces=POM)}.jar"


def compat_jar_name() -> str:
    return plugin_jar_name().removesuffix(".jar") + "-kafka-3.7-compat.jar"


def plugin_copy(instructions: list[Instruction], jar: str | None = None) -> tuple[str, str]:
    """(source, target) of the COPY --from=plugin of `jar` (the plugin jar by default)."""
    name = jar or plugin_jar_name()
    (found,) = [
        words for words in copied_from("plugin", instructions) if words[0].endswith("/" + name)
    ]
    source, target = found
    return source, target


def plugin_jar_in_image() -> str:
    """Where the Kafka image puts the plugin jar of the plugin stage."""
    return plugin_copy(stage("kafka"))[1]


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
    # The storage manager looks the next segment up there too (NextSegmentLookup).
    assert properties["rsm.config.metadata.manager.address"] == metadata_manager
