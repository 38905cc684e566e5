"""remotelog as a user gets it: the wheel installed with its `spark` extra into a fresh
virtualenv by pip (its dependencies from the package index, quick from pip's cache),
run from a directory outside the checkout, with an empty cache and neither
KAFKA_JARS_DIR nor KAFKA_PLUGIN_JAR: the plugin jar comes from the wheel, Apache
Kafka's jars are fetched on first use (by Maven, installed here)."""

import hashlib
import os
import re
import subprocess
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from remotelog.dev.kafka_demo import MIN_RECORDS
from remotelog.dev.kafka_jars import KafkaLock

# The fresh venv's pip install (from pip's cache, else the index) counts toward the
# first test's time; the demo starts Kafka, the services and Spark.
pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]
# Settings of the test run that would point the installed remotelog at the checkout.
CHECKOUT_ENV = ("KAFKA_JARS_DIR", "KAFKA_PLUGIN_JAR", "PYTHONPATH", "VIRTUAL_ENV")


@dataclass(frozen=True)
class Installed:
    env_dir: Path
    cwd: Path
    cache: Path

    def remotelog(self, *args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k not in CHECKOUT_ENV}
        environ["XDG_CACHE_HOME"] = str(self.cache)
        return subprocess.run(
            [str(self.env_dir / "bin" / "remotelog"), *args],
            cwd=self.cwd,
            env=environ,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    root = tmp_path_factory.mktemp("installed")
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{wheel}[spark]"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (root / "elsewhere").mkdir()
    return Installed(env_dir, root / "elsewhere", root / "cache")


def test_the_plugin_jar_is_the_one_the_wheel_carries(installed, wheel):
    done = installed.remotelog("kafka-plugin", "path")
    assert done.returncode == 0, done.stderr
    jar = Path(done.stdout.strip())
    assert jar.is_relative_to(installed.env_dir)
    packed = zipfile.ZipFile(wheel).read(f"remotelog/jars/{jar.name}")
    assert hashlib.sha256(jar.read_bytes()).digest() == hashlib.sha256(packed).digest()
    assert "dev/remotelog/kafka/RemotelogStorageManager.class" in zipfile.ZipFile(jar).namelist()
    done = installed.remotelog("kafka-plugin", "compat-path")
    assert done.returncode == 0, done.stderr
    compat = Path(done.stdout.strip())
    assert compat.parent == jar.parent
    assert "org/apache/kafka/common/metrics/Monitorable.class" in zipfile.ZipFile(compat).namelist()


def test_remotelog_demo_runs_from_the_wheel_alone(installed):
    lock = KafkaLock.read()
    done = installed.remotelog("demo", "--records", str(MIN_RECORDS))
    assert done.returncode == 0, done.stderr[-3000:]
    fetched = installed.cache / "remotelog" / f"kafka-{lock.version}" / "libs"
    assert (
        f"fetching Apache Kafka {lock.version}'s {len(lock.artifacts)} jars into {fetched}"
        in done.stderr
    )
    assert sorted(p.name for p in fetched.glob("*.jar")) == sorted(
        a.file_name for a in lock.artifacts
    )
    assert re.search(rf"broker +Apache Kafka {lock.version} with the remotelog plugin", done.stdout)
    verified = re.search(
        r"records verified +([\d,]+) from local disk, ([\d,]+) from remotelog", done.stdout
    )
    assert verified is not None, done.stdout
    assert verified[1] == verified[2]
    assert int(verified[1].replace(",", "")) >= MIN_RECORDS
