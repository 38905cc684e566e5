"""Kafka's partition state files: producer snapshot, leader-epoch checkpoint,
partition.metadata, and the log dir's replication-offset-checkpoint (high watermarks);
and how a partition directory names its segments.

.snapshot (version 1): version i16, crc u32 (CRC-32C of everything after it),
  entry count i32, then 46-byte entries: producer id i64, producer epoch i16,
  last sequence i32, last offset i64, offset delta i32, timestamp i64,
  coordinator epoch i32, current txn first offset i64.
leader-epoch-checkpoint: text lines "0" (version), count, then "epoch startOffset".
partition.metadata: "version: 0" and "topic_id: <Kafka base64 Uuid>".
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import kafka_uuid_str, parse_kafka_uuid

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
HW_CHECKPOINT = "replication-offset-checkpoint"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")
_PRODUCER_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptStateFileError(ValueError):
    """A state file that fails validation; the message names it."""


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def parse_producer_snapshot(data: bytes, source: str = "<snapshot>") -> list[ProducerStateEntry]:
    if len(data) < _SNAPSHOT_HEAD.size:
        raise CorruptStateFileError(f"{source}: {len(data)} bytes is shorter than the header")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptStateFileError(f"{source}: unsupported snapshot version {version}")
    computed = crc32c.crc32c(data[6:])
    if computed != crc:
        raise CorruptStateFileError(
            f"{source}: CRC-32C mismatch (stored {crc:#010x}, computed {computed:#010x})"
        )
    if count < 0 or _SNAPSHOT_HEAD.size + count * _PRODUCER_ENTRY.size != len(data):
        raise CorruptStateFileError(f"{source}: {count} entries do not fill {len(data)} bytes")
    body = data[_SNAPSHOT_HEAD.size :]
    return [ProducerStateEntry(*fields) for fields in _PRODUCER_ENTRY.iter_unpack(body)]


def producer_snapshot_bytes(entries: Sequence[ProducerStateEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        _PRODUCER_ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(body)) + body


def parse_leader_epoch_checkpoint(
    text: str, source: str = "leader-epoch-checkpoint"
) -> list[tuple[int, int]]:
    lines = text.splitlines()
    # Kafka creates the file empty with the partition and reads an empty file, or one
    # holding only its version, as no entries (CheckpointFile): a follower's stays so
    # until its first fetched batch.
    if len(lines) < 2 and (not lines or lines[0].strip() == "0"):
        return []
    if lines[0].strip() != "0":
        raise CorruptStateFileError(f"{source}: expected version 0 and an entry count")
    try:
        count = int(lines[1])
        entries = [tuple(int(part) for part in line.split()) for line in lines[2:] if line.strip()]
    except ValueError:
        raise CorruptStateFileError(f"{source}: malformed line") from None
    if count != len(entries) or any(len(e) != 2 for e in entries):
        raise CorruptStateFileError(
            f"{source}: count {count} does not match {len(entries)} entries"
        )
    return [(e[0], e[1]) for e in entries]


def leader_epoch_checkpoint_text(entries: Sequence[tuple[int, int]]) -> str:
    return "0\n" + f"{len(entries)}\n" + "".join(f"{epoch} {offset}\n" for epoch, offset in entries)


def parse_partition_metadata(text: str, source: str = "partition.metadata") -> uuid.UUID:
    pairs = (line.partition(":") for line in text.splitlines() if line.strip())
    fields = {key.strip(): value.strip() for key, _, value in pairs}
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CorruptStateFileError(f"{source}: expected 'version: 0' and 'topic_id: ...'")
    try:
        return parse_kafka_uuid(fields["topic_id"], "topic_id")
    except InvalidArgumentError as exc:
        raise CorruptStateFileError(f"{source}: {exc}") from None


def partition_metadata_text(topic_id: uuid.UUID) -> str:
    return f"version: 0\ntopic_id: {kafka_uuid_str(topic_id)}"


def segment_name(base_offset: int) -> str:
    """A segment's file name without suffix: its base offset in 20 digits."""
    return f"{base_offset:020d}"


def read_hw_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's replication-offset-checkpoint: version, count, then "topic partition offset"."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    entries = {}
    for line in lines[2:]:
        topic, partition, offset = line.split()
        entries[(topic, int(partition))] = int(offset)
    return entries


def write_hw_checkpoint(path: Path, entries: dict[tuple[str, int], int]) -> None:
    """Replace the replication-offset-checkpoint (temp file, fsync, rename, as Kafka does)."""
    lines = [f"{t} {p} {hw}" for (t, p), hw in sorted(entries.items())]
    replace_file(
        path, ("0\n" + f"{len(lines)}\n" + "".join(line + "\n" for line in lines)).encode()
    )


def replace_file(path: Path, data: bytes) -> None:
    """Write a state file as Kafka does: a temp file, fsync, then rename over it."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
