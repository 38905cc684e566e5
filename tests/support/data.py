"""Test data kept in the repository, so a clone alone runs the suite."""

from pathlib import Path

# Real broker-written partition directories (read-only; see its README.md).
KAFKA_LOGS = Path(__file__).resolve().parents[1] / "data" / "kafka-logs"
# Manifests as earlier releases wrote them, each under a bucket's layout (see its README.md).
MANIFESTS = Path(__file__).resolve().parents[1] / "data" / "manifests"
