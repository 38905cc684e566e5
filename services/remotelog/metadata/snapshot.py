"""Snapshots of the materialised metadata, so a restart replays only the tail of the topic.

Kafka's topic-based RLMM re-reads `__remote_log_metadata` from the start on
every restart. Here the whole materialised state (every cache with its epoch
maps, exactly, so answers after a restart equal a full replay) and the next
offset of each metadata partition are written to one file, atomically (temp
name, fsync, rename). A file that fails its CRC, has another format version,
or belongs to another incarnation of the topic (its topic id differs: the
topic was deleted and recreated) or another partition count is refused, and
the caller replays the topic instead.

Layout: magic `RLMMSNAP`, u16 version, u32 CRC-32C of the body, then the body
(little-endian): metadata topic id (16 bytes), u32 partition count, the
registered user partitions, then per metadata partition its next offset,
caches (segments as id + packed bytes, then per leader epoch the highest
offset, referenced (start offset, id) pairs and unreferenced ids), partition
deletion states and deleted partitions.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from remotelog.core.model import RemotePartitionDeleteMetadata, TopicIdPartition
from remotelog.core.states import RemotePartitionDeleteState
from remotelog.metadata.cache import LeaderEpochState, RemoteLogMetadataCache
from remotelog.metadata.partition_state import MetadataPartitionState

MAGIC = b"RLMMSNAP"
VERSION = 1
FILE_NAME = "remote-log-metadata.snapshot"
_PREAMBLE = struct.Struct("<8sHI")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_Q = struct.Struct("<q")
_EPOCH = struct.Struct("<iBqII")  # epoch, has highest, highest, referenced, unreferenced
_REF = struct.Struct("<q16s")
_DELETE = struct.Struct("<Bqi")
_DELETE_STATES = tuple(RemotePartitionDeleteState)


class SnapshotError(ValueError):
    """The snapshot can not be used; the message says why."""


@dataclass(frozen=True)
class Snapshot:
    topic_id: uuid.UUID
    num_partitions: int
    registered: frozenset[TopicIdPartition]
    states: dict[int, MetadataPartitionState]


# -- writing -----------------------------------------------------------------


def _tip(out: list[bytes], tip: TopicIdPartition) -> None:
    name = tip.topic.encode()
    out += (tip.topic_id.bytes, _U16.pack(len(name)), name, _I32.pack(tip.partition))


def _epoch(out: list[bytes], epoch: int, state: LeaderEpochState) -> None:
    refs = list(state.offsets.items())
    highest = state.highest_log_offset
    out.append(
        _EPOCH.pack(
            epoch,
            highest is not None,
            highest or 0,
            len(refs),
            len(state.unreferenced),
        )
    )
    out += (_REF.pack(key, segment_id) for key, segment_id in refs)
    out += sorted(state.unreferenced)


def _cache(out: list[bytes], cache: RemoteLogMetadataCache) -> None:
    _tip(out, cache.topic_id_partition)
    out.append(_U32.pack(len(cache.segments)))
    for segment_id, value in cache.segments.items():
        out += (segment_id, _U32.pack(len(value)), value)
    out.append(_U32.pack(len(cache.epochs)))
    for epoch, state in cache.epochs.items():
        _epoch(out, epoch, state)


def _state(out: list[bytes], state: MetadataPartitionState) -> None:
    out += (_U32.pack(state.partition), _Q.pack(state.next_offset))
    out.append(_U32.pack(len(state.caches)))
    for cache in state.caches.values():
        _cache(out, cache)
    out.append(_U32.pack(len(state.deletes)))
    for tip, delete in state.deletes.items():
        _tip(out, tip)
        out.append(_DELETE.pack(delete.state.value, delete.event_timestamp_ms, delete.broker_id))
    out.append(_U32.pack(len(state.deleted)))
    for tip in state.deleted:
        _tip(out, tip)


def encode(snapshot: Snapshot) -> bytes:
    out: list[bytes] = [snapshot.topic_id.bytes, _U32.pack(snapshot.num_partitions)]
    out.append(_U32.pack(len(snapshot.registered)))
    for tip in sorted(snapshot.registered, key=str):
        _tip(out, tip)
    out.append(_U32.pack(len(snapshot.states)))
    for partition in sorted(snapshot.states):
        _state(out, snapshot.states[partition])
    body = b"".join(out)
    return _PREAMBLE.pack(MAGIC, VERSION, crc32c.crc32c(body)) + body


def write(directory: Path, snapshot: Snapshot) -> Path:
    """Write atomically: a crash leaves the previous snapshot or the new one, never half."""
    directory.mkdir(parents=True, exist_ok=True)
    data = encode(snapshot)
    final = directory / FILE_NAME
    temp = directory / f".{FILE_NAME}.{os.getpid()}.tmp"
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, final)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return final


def copy_states(states: Iterable[MetadataPartitionState]) -> dict[int, MetadataPartitionState]:
    """A copy to encode in another thread while the originals keep changing.

    Packed segments and ids are immutable bytes, so copying the containers is
    enough (a few hundred milliseconds for a million segments at worst).
    """
    copies: dict[int, MetadataPartitionState] = {}
    for state in states:
        copy = MetadataPartitionState(state.partition)
        copy.next_offset = state.next_offset
        copy.deletes = dict(state.deletes)
        copy.deleted = set(state.deleted)
        for tip, cache in state.caches.items():
            clone = RemoteLogMetadataCache(tip)
            clone.segments = dict(cache.segments)
            for epoch, epoch_state in cache.epochs.items():
                twin = LeaderEpochState()
                for key, segment_id in epoch_state.offsets.items():
                    twin.offsets.put(key, segment_id)
                twin.unreferenced = set(epoch_state.unreferenced)
                twin.highest_log_offset = epoch_state.highest_log_offset
                clone.epochs[epoch] = twin
            copy.caches[tip] = clone
        copies[state.partition] = copy
    return copies


# -- reading -----------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise SnapshotError(f"truncated at byte {self.pos}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        values = (
            fmt.unpack_from(self.data, self.pos) if self.pos + fmt.size <= len(self.data) else ()
        )
        if not values:
            raise SnapshotError(f"truncated at byte {self.pos}")
        self.pos += fmt.size
        return values

    def u32(self) -> int:
        return self.unpack(_U32)[0]

    def tip(self) -> TopicIdPartition:
        topic_id = uuid.UUID(bytes=self.take(16))
        name = self.take(self.unpack(_U16)[0]).decode()
        return TopicIdPartition(topic_id, name, self.unpack(_I32)[0])


def _read_cache(r: _Reader) -> RemoteLogMetadataCache:
    cache = RemoteLogMetadataCache(r.tip())
    segments = cache.segments
    for _ in range(r.u32()):
        segment_id = r.take(16)
        segments[segment_id] = r.take(r.u32())
    for _ in range(r.u32()):
        epoch, has_highest, highest, referenced, unreferenced = r.unpack(_EPOCH)
        state = LeaderEpochState()
        state.highest_log_offset = highest if has_highest else None
        for _ in range(referenced):
            key, segment_id = _REF.unpack(r.take(_REF.size))
            state.offsets.put(key, segment_id)
        state.unreferenced = {r.take(16) for _ in range(unreferenced)}
        cache.epochs[epoch] = state
    return cache


def _read_state(r: _Reader) -> MetadataPartitionState:
    state = MetadataPartitionState(r.u32())
    state.next_offset = r.unpack(_Q)[0]
    for _ in range(r.u32()):
        cache = _read_cache(r)
        state.caches[cache.topic_id_partition] = cache
    for _ in range(r.u32()):
        tip = r.tip()
        state_id, event_ts, broker = r.unpack(_DELETE)
        state.deletes[tip] = RemotePartitionDeleteMetadata(
            tip, _DELETE_STATES[state_id], event_ts, broker
        )
    state.deleted = {r.tip() for _ in range(r.u32())}
    return state


def decode(data: bytes) -> Snapshot:
    if len(data) < _PREAMBLE.size:
        raise SnapshotError("shorter than its header")
    magic, version, crc = _PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotError("not a remotelog metadata snapshot")
    if version != VERSION:
        raise SnapshotError(f"format version {version}, this build reads {VERSION}")
    body = data[_PREAMBLE.size :]
    if crc32c.crc32c(body) != crc:
        raise SnapshotError("CRC mismatch (corrupt)")
    r = _Reader(body)
    try:
        topic_id = uuid.UUID(bytes=r.take(16))
        num_partitions = r.u32()
        registered = frozenset(r.tip() for _ in range(r.u32()))
        states = {}
        for _ in range(r.u32()):
            state = _read_state(r)
            states[state.partition] = state
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"unreadable: {exc}") from None
    if r.pos != len(body):
        raise SnapshotError(f"{len(body) - r.pos} bytes after the end")
    return Snapshot(topic_id, num_partitions, registered, states)


def load(directory: Path) -> Snapshot | None:
    """The snapshot in `directory`, None when there is none; SnapshotError when unusable."""
    path = directory / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(data)
