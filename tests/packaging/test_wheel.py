"""The distribution: one wheel whose `remotelog` namespace merges services/ and clients/.

Builds the wheel, checks what it holds, installs it (without the editable
checkout) into a brand-new virtualenv and imports it from another directory.
Dependencies are borrowed from the test environment through a path entry, so
the check needs no network.
"""

import subprocess
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.packaging


def test_wheel_holds_one_remotelog_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"remotelog"}
    assert "remotelog/__init__.py" not in names  # PEP 420 namespace
    for expected in [
        "remotelog/core/model.py",
        "remotelog/core/metadata_serde.py",
        "remotelog/rpc/errors.py",
        "remotelog/client/base.py",
        "remotelog/client/tiered_consumer.py",
        "remotelog/spark/source.py",
        "remotelog/api/segmentstore/v1/segment_store_pb2.py",
        "remotelog/api/segmentstore/v1/segment_store_pb2_grpc.py",
        "remotelog/api/type/v1/segment_pb2.pyi",
        # the C extensions, built by hatch_build.py
        "remotelog/kafka/_fastrecords" + sysconfig.get_config_var("EXT_SUFFIX"),
        "remotelog/fileio/_pagecache" + sysconfig.get_config_var("EXT_SUFFIX"),
        "remotelog/fetch/_batchfile" + sysconfig.get_config_var("EXT_SUFFIX"),
        # the Kafka plugin, as pyspark carries Spark's jars, and the broker's jars' lock
        "remotelog/jars/remotelog-kafka-plugin-0.1.0.jar",
        "remotelog/jars/remotelog-kafka-plugin-0.1.0-kafka-3.7-compat.jar",
        "remotelog/dev/kafka-jars.lock",
    ]:
        assert expected in names
    # a platform wheel: it carries a C extension for this interpreter
    assert not wheel.name.endswith("-none-any.whl")
    assert not any(n.startswith(("services/", "clients/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "remotelog = remotelog.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )


def test_wheel_installs_and_imports_in_a_fresh_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Dependencies (grpcio, protobuf) come from this environment's site-packages;
    # a path line does not run that directory's .pth files, so the editable
    # checkout stays out of reach.
    Path(site, "borrowed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import remotelog.core, remotelog.api.segmentstore.v1\n"
        # every service, as `remotelog serve` starts it, and the command line
        "import remotelog.segmentstore.server, remotelog.metadata.server\n"
        "import remotelog.scheduler.server, remotelog.fetch.server, remotelog.remover.server\n"
        "import remotelog.cli.main\n"
        "from remotelog.api.segmentstore.v1 import segment_store_pb2_grpc\n"
        "from remotelog.client import ServiceClient\n"
        "import remotelog.core.model as m\n"
        "from remotelog.kafka import records, _fastrecords\n"
        "assert records.COMPILED, 'compiled decoder not in use'\n"
        "from remotelog.fileio import pagecache\n"
        "assert pagecache.COMPILED, 'compiled page-cache reader not in use'\n"
        "print(m.__file__)\n"
        "print(_fastrecords.__file__)\n"
    )
    result = subprocess.run(
        [str(python), "-c", code], cwd=elsewhere, capture_output=True, text=True, check=True
    )
    model_file, extension_file = result.stdout.split()
    assert model_file.startswith(str(env_dir))
    assert extension_file.startswith(str(env_dir))
    version = subprocess.run(
        [str(env_dir / "bin" / "remotelog"), "version"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.startswith("remotelog 0.")
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--path", site, "--format", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "remotelog==" in listed
    assert not (Path(site) / "services").exists()
    assert not (Path(site) / "clients").exists()
