from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def kafka_logs() -> Path:
    """Real broker-written partition directories (read-only; see shared/kafka-logs/README.md)."""
    path = SHARED / "kafka-logs"
    if not path.is_dir():
        pytest.fail(f"shared test data missing: {path}")
    return path
