import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
S3_SERVER = Path(__file__).resolve().parent / "support" / "s3_server.py"


@pytest.fixture(scope="session")
def kafka_logs() -> Path:
    """Real broker-written partition directories (read-only; see shared/kafka-logs/README.md)."""
    path = SHARED / "kafka-logs"
    if not path.is_dir():
        pytest.fail(f"shared test data missing: {path}")
    return path


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 server on a free loopback port, in its own process."""
    process = subprocess.Popen(
        [sys.executable, str(S3_SERVER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        pytest.fail(f"moto server did not start: {line!r}")
    yield f"http://127.0.0.1:{int(line.split()[1])}"
    process.terminate()
    process.wait(timeout=10)
