"""Hatchling build hook: compiles the C extensions.

- remotelog.kafka._fastrecords, the record decoder: record decoding is the
  Spark connector's per-record cost; the compiled decoder is several times
  faster than the Python one in records.py, which stays the reference and the
  fallback.
- remotelog.fileio._pagecache, reads of page-cached bytes that never
  block (preadv2 RWF_NOWAIT into a new bytes object); pagecache.py is the
  fallback.
- remotelog.fetch._batchfile, a bulk read's whole record batches read from the
  segment file straight into the message that carries them; batch_file.py
  holds the reference.

Runs for wheels and editable installs alike; each extension lands next to its
source, so an editable install imports it from the tree. Without a C compiler
the build warns and ships pure Python, unless REMOTELOG_REQUIRE_EXTENSION=1
(set by `make setup`) makes that an error.

A wheel (not an editable install) also carries the remotelog plugin for Apache
Kafka as remotelog/jars/remotelog-kafka-plugin-<version>.jar: KAFKA_PLUGIN_JAR's,
else the jar `make setup` built when it is newer than every input, else built now
by Maven (a JDK and Maven, as for any build from the sdist); and beside it the
compat jar Kafka 3.7-4.0 brokers need, from the same build.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PLUGIN = Path("clients/kafka-plugin")
# The plugin jar, not its compat jar of Monitorable (COMPAT_SUFFIX), which goes beside it.
PLUGIN_JARS = "remotelog-kafka-plugin-*[0-9].jar"
COMPAT_SUFFIX = "-kafka-3.7-compat.jar"
PLUGIN_INPUTS = (PLUGIN / "pom.xml", PLUGIN / "src" / "main", Path("jvm/pom.xml"), Path("protos"))
SOURCES = (
    Path("services/remotelog/kafka/_fastrecords.c"),
    Path("services/remotelog/fileio/_pagecache.c"),
    Path("services/remotelog/fetch/_batchfile.c"),
)


def _compiler() -> list[str] | None:
    configured = sysconfig.get_config_var("CC") or "cc"
    command = shlex.split(os.environ.get("CC", configured))
    if command and shutil.which(command[0]):
        return command
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    return None


def build_extension(root: Path, relative: Path) -> Path:
    """Compile `relative` (a .c file) into `<stem><EXT_SUFFIX>` beside it; returns its path."""
    source = root / relative
    target = source.with_name(source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
    if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C compiler found (set CC)")
    include = sysconfig.get_paths()["include"]
    tmp = target.with_suffix(target.suffix + ".tmp")
    command = [
        *compiler,
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Werror=implicit-function-declaration",
        f"-I{include}",
        str(source),
        "-o",
        str(tmp),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr}")
    tmp.replace(target)  # atomic: an interrupted build never leaves half a library
    return target


def _newest_input(root: Path) -> float:
    newest = 0.0
    for entry in PLUGIN_INPUTS:
        path = root / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        newest = max([newest, *(f.stat().st_mtime for f in files)])
    return newest


def plugin_jar(root: Path) -> Path:
    """The plugin's shaded jar: KAFKA_PLUGIN_JAR's (a build that made it already, as the
    image's plugin stage does), else the checkout's when current with its inputs, else
    built now by Maven."""
    given = os.environ.get("KAFKA_PLUGIN_JAR")
    if given:
        if not Path(given).is_file():
            raise RuntimeError(f"KAFKA_PLUGIN_JAR={given}: no such file")
        return Path(given)
    built = sorted((root / PLUGIN / "target").glob(PLUGIN_JARS))
    if built and built[-1].stat().st_mtime >= _newest_input(root):
        return built[-1]
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "the wheel carries the remotelog plugin for Apache Kafka, built by Maven: "
            "install a JDK (17+) and Maven, or build the jar first (make setup)"
        )
    command = [mvn, "-q", "-B", "-f", str(root / PLUGIN / "pom.xml"), "package", "-DskipTests"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    built = sorted((root / PLUGIN / "target").glob(PLUGIN_JARS))
    if result.returncode != 0 or not built:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}")
    return built[-1]


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        if version != "editable":
            jar = plugin_jar(root)
            compat = jar.with_name(jar.name.removesuffix(".jar") + COMPAT_SUFFIX)
            if not compat.is_file():
                raise RuntimeError(f"{compat}: the plugin's compat jar is not beside it")
            for carried in (jar, compat):
                build_data["force_include"][str(carried)] = f"remotelog/jars/{carried.name}"
        try:
            built = [build_extension(root, source) for source in SOURCES]
        except RuntimeError as exc:
            if os.environ.get("REMOTELOG_REQUIRE_EXTENSION") == "1":
                raise
            print(f"remotelog: C extensions not built, pure Python: {exc}", file=sys.stderr)
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            for library in built:
                relative = library.relative_to(root / "services").as_posix()
                build_data["force_include"][str(library)] = relative
