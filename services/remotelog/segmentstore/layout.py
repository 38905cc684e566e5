"""Where a segment's objects live, and the manifest that makes the bucket describe itself.

Keys: `<prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segment uuid>.<suffix>`
with suffixes `log` (the segment's records), `indexes` (every index, one after
another) and `rsm-manifest` (JSON: the full RemoteLogSegmentMetadata and where
each index sits in `.indexes`). The manifest is written last and deleted first,
so a manifest always names complete objects; objects without one are leftovers
of an interrupted copy or delete, for the scrub to remove.

The topic name is validated by Kafka's rules (TopicIdPartition does it) before
any key is built, so no input can climb out of its partition's prefix.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

from remotelog.core.errors import InvalidArgumentError, RemoteStorageError
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentFile,
    TopicIdPartition,
    kafka_uuid_str,
    parse_kafka_uuid,
)
from remotelog.core.states import RemoteLogSegmentState
from remotelog.transforms.chunks import ChunkIndex

# Version 1: plain objects. Version 2: chunked objects, compressed and/or encrypted
# (its `transforms`). A plain segment is still written as version 1, so a release
# that reads only version 1 reads every segment not transformed.
MANIFEST_VERSION = 2
PLAIN_MANIFEST_VERSION = 1
ENCRYPTION_ALGORITHM = "AES-256-GCM"


class ManifestVersionError(RemoteStorageError):
    """A manifest of a version newer than this remotelog reads: named, never guessed at."""


INDEX_FILES = (
    SegmentFile.OFFSET_INDEX,
    SegmentFile.TIME_INDEX,
    SegmentFile.TRANSACTION_INDEX,
    SegmentFile.PRODUCER_SNAPSHOT,
    SegmentFile.LEADER_EPOCH_CHECKPOINT,
)
REQUIRED_FILES = frozenset(SegmentFile) - {SegmentFile.TRANSACTION_INDEX}


def validate_key_prefix(prefix: str, field: str = "key.prefix") -> str:
    """A configured prefix: no `..` segment, no leading slash, no backslash."""
    parts = prefix.split("/")
    if prefix.startswith("/") or "\\" in prefix or any(p in (".", "..") for p in parts):
        raise InvalidArgumentError(field, f"{prefix!r} must be a relative key prefix without '..'")
    return prefix


def partition_prefix(prefix: str, tip: TopicIdPartition) -> str:
    return f"{prefix}{tip.topic}-{kafka_uuid_str(tip.topic_id)}/{tip.partition}/"


@dataclass(frozen=True, slots=True)
class SegmentKeys:
    """The three object keys of one remote segment."""

    base: str

    @classmethod
    def of(cls, prefix: str, metadata: RemoteLogSegmentMetadata) -> SegmentKeys:
        segment_id = metadata.remote_log_segment_id
        name = f"{metadata.start_offset:020d}-{kafka_uuid_str(segment_id.id)}"
        return cls(partition_prefix(prefix, segment_id.topic_id_partition) + name)

    @property
    def log(self) -> str:
        return self.base + ".log"

    @property
    def indexes(self) -> str:
        return self.base + ".indexes"

    @property
    def manifest(self) -> str:
        return self.base + ".rsm-manifest"

    @property
    def all(self) -> tuple[str, str, str]:
        """In deletion order: the manifest first."""
        return (self.manifest, self.indexes, self.log)


@dataclass(frozen=True, slots=True)
class SegmentObject:
    """What a segment object's key says: its partition, segment id and start offset."""

    topic_id_partition: TopicIdPartition
    segment_id: uuid.UUID
    start_offset: int
    suffix: str


_UUID_CHARS = 22  # Kafka's Uuid.toString(): unpadded URL-safe base64 of 16 bytes
_SUFFIXES = ("log", "indexes", "rsm-manifest")


def parse_segment_key(prefix: str, key: str) -> SegmentObject | None:
    """The inverse of SegmentKeys.of; None for a key this layout did not write."""
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("/")
    if len(parts) != 3:
        return None
    directory, partition, name = parts
    stem, _, suffix = name.partition(".")
    if suffix not in _SUFFIXES or len(stem) != 20 + 1 + _UUID_CHARS or stem[20] != "-":
        return None
    if len(directory) <= _UUID_CHARS + 1 or directory[-_UUID_CHARS - 1] != "-":
        return None
    if not (stem[:20].isdigit() and partition.isdigit()):
        return None
    try:
        tip = TopicIdPartition(
            parse_kafka_uuid(directory[-_UUID_CHARS:], "topic_id"),
            directory[: -_UUID_CHARS - 1],
            int(partition),
        )
        segment_id = parse_kafka_uuid(stem[21:], "segment_id")
    except InvalidArgumentError:
        return None
    if partition_prefix(prefix, tip) + name != key:  # not in canonical form
        return None
    return SegmentObject(tip, segment_id, int(stem[:20]), suffix)


def segment_custom_metadata(remote_size: int, keys: SegmentKeys, max_bytes: int) -> bytes | None:
    """The KIP-917 custom metadata a copy returns: the bytes stored and the objects'
    prefix, as many as fit `max_bytes`."""
    fields: dict[str, object] = {"remote_size": remote_size, "object_prefix": keys.base}
    while fields:
        encoded = json.dumps(fields, separators=(",", ":")).encode()
        if len(encoded) <= max_bytes:
            return encoded
        fields.popitem()  # the object prefix goes first: it can be rebuilt from the id
    return None


@dataclass(frozen=True, slots=True)
class IndexRange:
    position: int
    size: int


def index_ranges(sizes: dict[SegmentFile, int]) -> dict[SegmentFile, IndexRange]:
    """Where each index of these sizes lies in the segment's indexes object: one after
    another, in INDEX_FILES' order."""
    ranges, position = {}, 0
    for index in INDEX_FILES:
        if index in sizes:
            ranges[index] = IndexRange(position, sizes[index])
            position += sizes[index]
    return ranges


@dataclass(frozen=True, slots=True)
class WrappedDataKey:
    """A segment's data key as its manifest keeps it: wrapped by the key-encryption key
    `key_id` of `key_provider`."""

    key_provider: str
    key_id: str
    wrapped: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "algorithm": ENCRYPTION_ALGORITHM,
            "key_provider": self.key_provider,
            "key_id": self.key_id,
            "wrapped_data_key": base64.b64encode(self.wrapped).decode(),
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> WrappedDataKey:
        if document["algorithm"] != ENCRYPTION_ALGORITHM:
            raise ValueError(f"unknown encryption algorithm {document['algorithm']!r}")
        return cls(
            str(document["key_provider"]),
            str(document["key_id"]),
            base64.b64decode(document["wrapped_data_key"], validate=True),
        )


@dataclass(frozen=True, slots=True)
class SegmentTransforms:
    """How a version-2 segment's objects are stored: as chunks, each compressed (zstd)
    where that shrinks it, then encrypted under the wrapped data key (if any)."""

    log_chunks: ChunkIndex
    indexes_chunks: ChunkIndex
    compression: str | None  # "zstd", or None: no chunk is compressed
    encryption: WrappedDataKey | None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "compression": self.compression or "none",
            "log_chunks": self.log_chunks.to_json(),
            "indexes_chunks": self.indexes_chunks.to_json(),
        }
        if self.encryption is not None:
            document["encryption"] = self.encryption.to_json()
        return document

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> SegmentTransforms:
        compression = document["compression"]
        if compression not in ("zstd", "none"):
            raise ValueError(f"unknown compression {compression!r}")
        encryption = document.get("encryption")
        return cls(
            ChunkIndex.from_json(document["log_chunks"]),
            ChunkIndex.from_json(document["indexes_chunks"]),
            None if compression == "none" else compression,
            None if encryption is None else WrappedDataKey.from_json(encryption),
        )


@dataclass(frozen=True, slots=True)
class Manifest:
    metadata: RemoteLogSegmentMetadata
    log_size: int  # the log's original bytes
    indexes: dict[SegmentFile, IndexRange]  # where each index lies in the original indexes
    transforms: SegmentTransforms | None = None  # None: plain objects (version 1)

    @property
    def remote_size(self) -> int:
        """The bytes the segment's objects hold, as its copy reported them."""
        if self.transforms is not None:
            t = self.transforms
            return t.log_chunks.stored_size + t.indexes_chunks.stored_size
        return self.log_size + sum(r.size for r in self.indexes.values())

    @property
    def version(self) -> int:
        return PLAIN_MANIFEST_VERSION if self.transforms is None else MANIFEST_VERSION

    def to_json(self) -> bytes:
        m = self.metadata
        segment_id = m.remote_log_segment_id
        tip = segment_id.topic_id_partition
        document: dict[str, Any] = {
            "version": self.version,
            "metadata": {
                "topic": tip.topic,
                "topic_id": kafka_uuid_str(tip.topic_id),
                "partition": tip.partition,
                "segment_id": kafka_uuid_str(segment_id.id),
                "start_offset": m.start_offset,
                "end_offset": m.end_offset,
                "max_timestamp_ms": m.max_timestamp_ms,
                "broker_id": m.broker_id,
                "event_timestamp_ms": m.event_timestamp_ms,
                "segment_size_in_bytes": m.segment_size_in_bytes,
                "segment_leader_epochs": [list(pair) for pair in m.segment_leader_epochs],
                "txn_index_empty": m.txn_index_empty,
            },
            "log": {"size": self.log_size},
            "indexes": {
                f.value: {"position": r.position, "size": r.size} for f, r in self.indexes.items()
            },
        }
        if m.custom_metadata is not None:
            document["metadata"]["custom_metadata"] = base64.b64encode(m.custom_metadata).decode()
        if self.transforms is not None:
            document["transforms"] = self.transforms.to_json()
        return json.dumps(document, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, source: str) -> Manifest:
        try:
            document = json.loads(raw)
            version = document.get("version")
            if type(version) is int and version > MANIFEST_VERSION:
                raise ManifestVersionError(
                    f"{source}: manifest version {version} is newer than the "
                    f"{MANIFEST_VERSION} this remotelog reads"
                )
            if version not in (PLAIN_MANIFEST_VERSION, MANIFEST_VERSION):
                raise ValueError(f"unsupported manifest version {version!r}")
            md = document["metadata"]
            tip = TopicIdPartition(
                parse_kafka_uuid(md["topic_id"], "topic_id"), md["topic"], md["partition"]
            )
            custom = md.get("custom_metadata")
            metadata = RemoteLogSegmentMetadata(
                remote_log_segment_id=RemoteLogSegmentId(
                    tip, parse_kafka_uuid(md["segment_id"], "segment_id")
                ),
                start_offset=md["start_offset"],
                end_offset=md["end_offset"],
                max_timestamp_ms=md["max_timestamp_ms"],
                broker_id=md["broker_id"],
                event_timestamp_ms=md["event_timestamp_ms"],
                segment_size_in_bytes=md["segment_size_in_bytes"],
                segment_leader_epochs=tuple(
                    (int(e), int(o)) for e, o in md["segment_leader_epochs"]
                ),
                custom_metadata=base64.b64decode(custom) if custom is not None else None,
                state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                txn_index_empty=bool(md.get("txn_index_empty", False)),
            )
            indexes = {
                SegmentFile(name): IndexRange(int(r["position"]), int(r["size"]))
                for name, r in document["indexes"].items()
            }
            transforms = None
            if version == MANIFEST_VERSION:
                transforms = SegmentTransforms.from_json(document["transforms"])
            return cls(metadata, int(document["log"]["size"]), indexes, transforms)
        except (ValueError, KeyError, TypeError, AttributeError, InvalidArgumentError) as exc:
            raise RemoteStorageError(f"{source}: unreadable manifest: {exc}") from None
