"""Write services/remotelog/dev/kafka-jars.lock: Apache Kafka's broker jars, as
jvm/kafka-broker/pom.xml resolves them at the pinned kafka.version, each with its
SHA-256.

`remotelog dev` and `remotelog demo` installed from a wheel fetch exactly these into
the user's cache (through Maven, or straight from Maven Central) and check each.
Run by `make kafka-lock` after jvm/pom.xml's kafka.version changes; a test checks the
file against what `make setup` resolved.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "jvm" / "kafka-broker" / "pom.xml"
LOCK = ROOT / "services" / "remotelog" / "dev" / "kafka-jars.lock"
HEADER = """\
# Apache Kafka's broker and tools with their runtime dependencies, as
# jvm/kafka-broker/pom.xml resolves them (`make kafka-lock` writes this file):
# group:artifact:version[:classifier] and the jar's SHA-256.
"""


def resolved(mvn: str) -> list[tuple[str, Path]]:
    """(coordinates without the type and scope, the jar in the local repository)."""
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "dependencies.txt"
        subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(POM),
                "dependency:list",
                "-DincludeScope=runtime",
                "-DoutputAbsoluteArtifactFilename=true",
                f"-DoutputFile={listing}",
            ],
            check=True,
        )
        lines = listing.read_text().splitlines()
    found = []
    for line in lines:
        fields = line.strip().split(" ", 1)[0].split(":")
        if len(fields) < 6 or fields[2] != "jar":
            continue
        group, artifact = fields[0], fields[1]
        classifier = fields[3] if len(fields) == 7 else ""
        version = fields[-3]
        coordinates = ":".join([group, artifact, version, *([classifier] if classifier else [])])
        found.append((coordinates, Path(fields[-1])))
    return sorted(found)


def main() -> int:
    mvn = sys.argv[1] if len(sys.argv) > 1 else "mvn"
    namespace = "{http://maven.apache.org/POM/4.0.0}"
    properties = ElementTree.parse(ROOT / "jvm" / "pom.xml").find(f"{namespace}properties")
    assert properties is not None
    version = (properties.findtext(f"{namespace}kafka.version") or "").strip()
    lines = [HEADER, f"kafka.version {version}\n"]
    for coordinates, jar in resolved(mvn):
        lines.append(f"{coordinates} {hashlib.sha256(jar.read_bytes()).hexdigest()}\n")
    LOCK.write_text("".join(lines))
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(lines) - 2} jars of Apache Kafka {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
