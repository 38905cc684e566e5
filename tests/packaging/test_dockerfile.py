"""deploy/Dockerfile, checked statically (no Docker daemon here): what it copies exists,
the wheel and the Kafka image take the plugin stage's one jar, the build stage can
compile the C extensions and must, the runtime stage runs
`remotelog` as a non-root user and exposes the services' default ports. The wheel it
builds is built and installed in a fresh venv by test_wheel.py."""

import re
import shlex
from pathlib import Path

import pytest
from support.kafka_image import (
    Instruction,
    compat_jar_name,
    dockerfile_stages,
    plugin_copy,
    stage,
)

from remotelog.cli.services import SERVICE_CONFIGS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stages() -> list[list[Instruction]]:
    return dockerfile_stages()[1]


def test_the_plugin_a_build_kafka_and_the_slim_runtime_last(stages):
    """The runtime is the last stage: `docker build` without a target builds it."""
    assert [stage[0][1] for stage in stages] == [
        "maven:3.9-eclipse-temurin-17 AS plugin",
        "python:3.11-slim AS build",
        "apache/kafka:${KAFKA_VERSION} AS kafka",
        "python:3.11-slim",
    ]


def test_the_wheel_and_the_kafka_image_carry_the_one_jar_the_plugin_stage_built(stages):
    plugin, build = stages[0], stages[1]
    (package,) = [a for i, a in plugin if i == "RUN"]
    assert "-f clients/kafka-plugin/pom.xml package" in package
    source, target = plugin_copy(build)
    kafka_source, _ = plugin_copy(stage("kafka"))
    assert source == kafka_source
    # The compat jar goes beside it, into the wheel and into a 3.7-4.0 Kafka image.
    compat, compat_target = plugin_copy(build, compat_jar_name())
    assert compat == str(Path(source).with_name(compat_jar_name()))
    assert compat_target == target
    assert plugin_copy(stage("kafka"), compat_jar_name())[0] == compat
    jar = target.rstrip("/") + "/" + Path(source).name
    # hatch_build.py takes KAFKA_PLUGIN_JAR's jar into the wheel, set before `pip wheel`.
    (set_at,) = [n for n, (i, a) in enumerate(build) if i == "ENV" and "KAFKA_PLUGIN_JAR" in a]
    assert f"KAFKA_PLUGIN_JAR={jar}" in build[set_at][1]
    (wheel_at,) = [n for n, (i, a) in enumerate(build) if i == "RUN" and "pip wheel" in a]
    assert set_at < wheel_at


def test_every_file_the_build_copies_exists_and_the_build_hook_is_among_them(stages):
    copied = []
    for _, arguments in (i for found in stages for i in found if i[0] == "COPY"):
        words = shlex.split(arguments)
        if any(w.startswith("--from") for w in words):
            continue
        copied += words[:-1]
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
    # pyproject's wheel build runs hatch_build.py and reads README.md.
    assert {"pyproject.toml", "README.md", "hatch_build.py", "services", "clients"} <= set(copied)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not set(copied) & set(ignored)


def test_the_build_stage_installs_a_compiler_and_requires_the_extensions(stages):
    build = stages[1]
    runs = " ".join(a for i, a in build if i == "RUN")
    assert re.search(r"apt-get install .*\bgcc\b", runs)
    assert "REMOTELOG_REQUIRE_EXTENSION=1" in " ".join(a for i, a in build if i == "ENV")


def test_the_runtime_stage_runs_remotelog_as_a_non_root_user(stages):
    runtime = dict(stages[-1])
    uid, _, gid = runtime["USER"].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid.isdigit()
    assert int(gid) != 0
    assert runtime["ENTRYPOINT"] == '["remotelog"]'
    # The one writable path of a read-only root filesystem belongs to that user.
    runs = " ".join(a for i, a in stages[-1] if i == "RUN")
    assert f"chown {uid}:{gid} /var/lib/remotelog" in runs
    assert runtime["VOLUME"] == '["/var/lib/remotelog"]'


def test_the_exposed_ports_are_the_services_default_ports(stages):
    exposed = {int(port) for port in dict(stages[-1])["EXPOSE"].split()}
    defaults = {int(cls().listen_address.rsplit(":", 1)[1]) for cls in SERVICE_CONFIGS.values()}
    assert exposed == defaults
