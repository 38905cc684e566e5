"""What the demos report of a broker's disk."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def disk_bytes(directories: Iterable[Path]) -> int:
    """The disk the files in these directories take: allocated blocks, not sizes, since a
    segment's index files are preallocated sparse (Kafka's and the simulated broker's)."""
    return sum(
        f.stat().st_blocks * 512
        for directory in directories
        for f in directory.iterdir()
        if f.is_file()
    )
