"""Apache Kafka's jars fetched into the user's cache: exactly the locked ones, each
checked, whole or not at all; by Maven, or from a Maven repository over HTTP (a
real HTTP server on loopback, laid out as Maven Central, holding the jars `make
setup` resolved)."""

import dataclasses
import functools
import hashlib
import http.server
import shutil
import threading
from pathlib import Path

import pytest
from support.kafka_cluster import pinned_kafka

from remotelog.dev.broker import BrokerError
from remotelog.dev.kafka_broker import kafka_libs
from remotelog.dev.kafka_jars import RESOLVED, KafkaLock, cached_kafka_jars

# A few of the locked jars, small ones first: enough to prove each rule, quick to copy.
SOME = 4


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_lock_is_what_make_setup_resolved_at_the_pinned_version():
    lock = KafkaLock.read()
    assert lock.version == pinned_kafka("kafka.version")
    libs = kafka_libs()
    resolved = {p.name: sha256(p) for p in libs.glob("*.jar")}
    assert {a.file_name: a.sha256 for a in lock.artifacts} == resolved


@pytest.fixture(scope="module")
def some_lock() -> KafkaLock:
    lock = KafkaLock.read()
    libs = kafka_libs()
    smallest = sorted(lock.artifacts, key=lambda a: (libs / a.file_name).stat().st_size)
    return dataclasses.replace(lock, artifacts=tuple(smallest[:SOME]))


class Repository:
    """A Maven repository served over HTTP from a folder; what it was asked for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.asked: list[str] = []
        repository = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                repository.asked.append(self.path)

        handler = functools.partial(Handler, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/maven2"

    def publish(self, lock: KafkaLock, libs: Path) -> None:
        for artifact in lock.artifacts:
            path = self.root / "maven2" / artifact.repository_path
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(libs / artifact.file_name, path)


@pytest.fixture
def repository(tmp_path):
    served = Repository(tmp_path / "repository")
    yield served
    served.server.shutdown()


def test_jars_are_fetched_once_and_each_checked(some_lock, repository, tmp_path):
    repository.publish(some_lock, kafka_libs())
    told: list[str] = []
    cache = tmp_path / "cache"
    libs = cached_kafka_jars(
        some_lock, cache, maven=None, repository=repository.url, announce=told.append
    )
    assert libs == cache / f"kafka-{some_lock.version}" / "libs"
    assert {p.name: sha256(p) for p in libs.glob("*.jar")} == {
        a.file_name: a.sha256 for a in some_lock.artifacts
    }
    assert told == [f"fetching Apache Kafka {some_lock.version}'s {SOME} jars into {libs} (once)"]
    asked = len(repository.asked)
    assert asked == SOME
    # Complete: the next use asks nothing.
    assert cached_kafka_jars(some_lock, cache, maven=None, repository=repository.url) == libs
    assert len(repository.asked) == asked


def test_a_jar_that_is_not_the_locked_one_is_refused_and_nothing_is_kept(
    some_lock, repository, tmp_path
):
    repository.publish(some_lock, kafka_libs())
    tampered = some_lock.artifacts[-1]
    (repository.root / "maven2" / tampered.repository_path).write_bytes(b"not the jar")
    cache = tmp_path / "cache"
    with pytest.raises(BrokerError) as refused:
        cached_kafka_jars(some_lock, cache, maven=None, repository=repository.url)
    assert f"{tampered.group}:{tampered.artifact}:{tampered.version} has SHA-256" in str(
        refused.value
    )
    assert list((cache / f"kafka-{some_lock.version}").iterdir()) == []  # no half folder


def test_an_unreachable_repository_is_one_line_saying_what_to_do(some_lock, repository, tmp_path):
    with pytest.raises(BrokerError) as refused:
        cached_kafka_jars(some_lock, tmp_path / "cache", maven=None, repository=repository.url)
    message = str(refused.value)
    assert "\n" not in message
    assert f"GET {repository.url}/{some_lock.artifacts[0].repository_path}: HTTP Error 404" in (
        message
    )
    assert "Install Maven" in message
    assert "KAFKA_JARS_REPOSITORY" in message
    assert "KAFKA_JARS_DIR" in message


def test_maven_fetches_them_where_it_is_installed(some_lock, repository, tmp_path):
    mvn = shutil.which("mvn")
    assert mvn is not None  # make setup requires it
    libs = cached_kafka_jars(some_lock, tmp_path / "cache", maven=mvn, repository=repository.url)
    assert {p.name: sha256(p) for p in libs.glob("*.jar")} == {
        a.file_name: a.sha256 for a in some_lock.artifacts
    }
    assert (libs / RESOLVED).exists()
    assert repository.asked == []  # Maven's own repositories, not the fallback
