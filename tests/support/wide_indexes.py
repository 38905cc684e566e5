"""Offset indexes in KIP-1333's layout, written from broker-written ones.

A Kafka after metadata version 4.4-IV1 writes each `.index` entry as a 4-byte
relative offset and an 8-byte position (big-endian), where older ones wrote two
4-byte fields. Built here straight from those byte layouts, not through the code
under test, so a parser that misreads either format fails against them.
"""

import shutil
import struct
from pathlib import Path

KAFKA_ENTRY = struct.Struct(">ii")
KIP_1333_ENTRY = struct.Struct(">iq")


def widened(index: bytes) -> bytes:
    """The same entries as 12-byte ones; a preallocated zero tail is dropped, as on roll."""
    entries = []
    for number, (relative, position) in enumerate(KAFKA_ENTRY.iter_unpack(index)):
        if number and relative == position == 0:
            break
        entries.append(KIP_1333_ENTRY.pack(relative, position))
    return b"".join(entries)


def widened_copy(source: Path, into: Path) -> Path:
    """A copy of the partition directory `source` whose offset indexes are 12-byte."""
    shutil.copytree(source, into)
    for index in into.glob("*.index"):
        index.write_bytes(widened(index.read_bytes()))
    return into
