"""Apache Kafka's jars and the remotelog plugin's, found without a checkout.

An installed remotelog carries the plugin's shaded jar (`remotelog/jars/`, as
pyspark carries Spark's) and a lock of the broker's jars (kafka-jars.lock: each
artifact and its SHA-256). On first use the broker's jars are fetched into the
user's cache, by Maven where it is installed (so its mirrors and proxies apply)
or else straight from a Maven repository, each checked against the lock, into a
temporary folder renamed into place only once all are there: a fetch cut off
half-way never counts. A checkout's `make setup` folders and KAFKA_JARS_DIR /
KAFKA_PLUGIN_JAR come first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import remotelog
from remotelog.dev.broker import BrokerError

LOCK = Path(__file__).with_name("kafka-jars.lock")
# A Maven repository laid out as Maven Central is (a mirror), for the direct fetch.
REPOSITORY_ENV = "KAFKA_JARS_REPOSITORY"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
RESOLVED = ".resolved"
PLUGIN_JARS = "remotelog-kafka-plugin-*[0-9].jar"
# Beside the plugin jar: Kafka 4.1's Monitorable alone, for the 3.7-4.0 brokers that lack
# it (the plugin jar carries no class of Kafka's, so none can stand in for the broker's).
COMPAT_SUFFIX = "-kafka-3.7-compat.jar"
# The first Kafka whose own class path has Monitorable (KIP-877).
MONITORABLE_SINCE = (4, 1)


def compat_jar_of(plugin: Path) -> Path:
    """The compat jar built or shipped beside `plugin`."""
    return plugin.with_name(plugin.name.removesuffix(".jar") + COMPAT_SUFFIX)


def lacks_monitorable(version: str) -> bool:
    """Whether a Kafka of `version` needs the compat jar beside the plugin."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) < MONITORABLE_SINCE


_CHUNK = 1 << 20


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str
    classifier: str
    sha256: str

    @property
    def file_name(self) -> str:
        """As Maven's copy-dependencies names it."""
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"

    @property
    def repository_path(self) -> str:
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"


@dataclass(frozen=True)
class KafkaLock:
    version: str
    artifacts: tuple[Artifact, ...]

    @classmethod
    def read(cls, path: Path = LOCK) -> KafkaLock:
        version, artifacts = "", []
        for line in path.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            name, value = line.split()
            if name == "kafka.version":
                version = value
                continue
            group, artifact, artifact_version, *classifier = name.split(":")
            artifacts.append(
                Artifact(group, artifact, artifact_version, "".join(classifier), value)
            )
        return cls(version, tuple(artifacts))


def kafka_cache() -> Path:
    """Where fetched jars are kept: $XDG_CACHE_HOME/remotelog, else ~/.cache/remotelog."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "remotelog"


def cached_kafka_jars(
    lock: KafkaLock,
    cache: Path,
    *,
    maven: str | None,
    repository: str = MAVEN_CENTRAL,
    announce: Callable[[str], None] = lambda _: None,
) -> Path:
    """The folder of the lock's jars under `cache`, fetched now if it is not complete:
    through `maven` (a mvn command; None: none installed), else from `repository`."""
    target = cache / f"kafka-{lock.version}" / "libs"
    if (target / RESOLVED).exists():
        return target
    announce(
        f"fetching Apache Kafka {lock.version}'s {len(lock.artifacts)} jars into {target} (once)"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetching-", dir=target.parent))
    try:
        libs = work / "libs"
        failures = []
        if maven is not None:
            try:
                _fetch_by_maven(lock, maven, work, libs)
            except BrokerError as error:
                failures.append(str(error))
                shutil.rmtree(libs, ignore_errors=True)
        if maven is None or failures:
            try:
                _fetch_by_url(lock, repository, libs)
            except BrokerError as error:
                failures.append(str(error))
                raise BrokerError(
                    f"Apache Kafka {lock.version}'s jars could not be fetched into {target}: "
                    f"{'; '.join(failures)}. Install Maven, let this host reach "
                    f"{repository} (or set {REPOSITORY_ENV} to a mirror), or set "
                    "KAFKA_JARS_DIR to a folder of kafka_2.13 and its dependencies"
                ) from None
        _verify(lock, libs)
        (libs / RESOLVED).touch()
        try:
            libs.rename(target)  # whole or not at all
        except OSError:
            if not (target / RESOLVED).exists():  # not another process's complete copy
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _fetch_by_maven(lock: KafkaLock, maven: str, work: Path, libs: Path) -> None:
    """Maven copies exactly the locked artifacts (none of their dependencies: the lock
    lists them all) from the repositories its settings name."""
    dependencies = "".join(
        "<dependency>"
        f"<groupId>{escape(a.group)}</groupId><artifactId>{escape(a.artifact)}</artifactId>"
        f"<version>{escape(a.version)}</version>"
        + (f"<classifier>{escape(a.classifier)}</classifier>" if a.classifier else "")
        + "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId>"
        "</exclusion></exclusions></dependency>"
        for a in lock.artifacts
    )
    pom = work / "pom.xml"
    pom.write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>dev.remotelog</groupId><artifactId>kafka-jars</artifactId>"
        "<version>1</version><packaging>pom</packaging>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )
    command = [maven, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies"]
    command += [f"-DoutputDirectory={libs}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BrokerError(f"{maven} failed: {error}") from None
    if done.returncode != 0:
        errors = [line for line in done.stdout.splitlines() if line.startswith("[ERROR]")]
        raise BrokerError(f"{maven} failed: {(errors or ['status ' + str(done.returncode)])[0]}")


def _fetch_by_url(lock: KafkaLock, repository: str, libs: Path) -> None:
    libs.mkdir(parents=True, exist_ok=True)
    for artifact in lock.artifacts:
        url = f"{repository.rstrip('/')}/{artifact.repository_path}"
        try:
            with (
                urllib.request.urlopen(url, timeout=60) as answer,
                (libs / artifact.file_name).open("wb") as out,
            ):
                while chunk := answer.read(_CHUNK):
                    out.write(chunk)
        except (urllib.error.URLError, OSError) as error:
            raise BrokerError(f"GET {url}: {error}") from None


def _verify(lock: KafkaLock, libs: Path) -> None:
    """Every locked jar there with its SHA-256, and nothing else."""
    expected = {a.file_name: a for a in lock.artifacts}
    found = {p.name for p in libs.iterdir()} if libs.is_dir() else set()
    if found != set(expected):
        missing = sorted(set(expected) - found)
        extra = sorted(found - set(expected))
        raise BrokerError(
            f"the fetched jars are not the locked ones: missing {missing}, extra {extra}"
        )
    for name, artifact in expected.items():
        digest = hashlib.sha256()
        with (libs / name).open("rb") as jar:
            while chunk := jar.read(_CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != artifact.sha256:
            raise BrokerError(
                f"{artifact.group}:{artifact.artifact}:{artifact.version} has SHA-256 "
                f"{digest.hexdigest()}, not the locked {artifact.sha256}: refused"
            )


def packaged_plugin_jar() -> Path | None:
    """The plugin jar an installed wheel carries (remotelog/jars/), if any."""
    for folder in remotelog.__path__:
        found = sorted(Path(folder, "jars").glob(PLUGIN_JARS))
        if found:
            return found[-1]
    return None
