"""The manifest beside each segment is a contract: read as documented, or refused by name."""

import json
import uuid

import pytest

from remotelog.core.errors import RemoteStorageError
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentFile,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState
from remotelog.segmentstore.layout import (
    IndexRange,
    Manifest,
    ManifestVersionError,
    SegmentKeys,
    SegmentTransforms,
    WrappedDataKey,
    segment_custom_metadata,
)
from remotelog.transforms.chunks import ChunkIndex

TIP = TopicIdPartition(uuid.UUID(int=7), "orders", 2)


def segment(start: int, end: int, epochs=((0, 0),)) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, uuid.UUID(int=start + 1)),
        start,
        end,
        1_000,
        4,
        1_700_000_000_000,
        4096,
        epochs,
        custom_metadata=b"\x01\x02",
        txn_index_empty=True,
    )


MANIFEST = Manifest(
    segment(100, 199, ((3, 100), (4, 150))),
    4096,
    {SegmentFile.OFFSET_INDEX: IndexRange(0, 80), SegmentFile.TIME_INDEX: IndexRange(80, 120)},
)


def test_a_manifest_reads_back_as_written():
    read = Manifest.from_json(MANIFEST.to_json(), "k")
    assert read == MANIFEST
    assert read.metadata.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    assert read.remote_size == 4096 + 80 + 120


def test_the_documented_fields_of_version_1():
    document = json.loads(MANIFEST.to_json())
    assert document["version"] == 1
    assert document["metadata"] == {
        "topic": "orders",
        "topic_id": "AAAAAAAAAAAAAAAAAAAABw",
        "partition": 2,
        "segment_id": "AAAAAAAAAAAAAAAAAAAAZQ",
        "start_offset": 100,
        "end_offset": 199,
        "max_timestamp_ms": 1_000,
        "broker_id": 4,
        "event_timestamp_ms": 1_700_000_000_000,
        "segment_size_in_bytes": 4096,
        "segment_leader_epochs": [[3, 100], [4, 150]],
        "txn_index_empty": True,
        "custom_metadata": "AQI=",
    }
    assert document["log"] == {"size": 4096}
    assert document["indexes"] == {
        "offset": {"position": 0, "size": 80},
        "timestamp": {"position": 80, "size": 120},
    }


def test_unknown_fields_of_a_known_version_are_ignored():
    document = json.loads(MANIFEST.to_json())
    document["written_by"] = "remotelog 9"
    document["metadata"]["future_field"] = [1, 2]
    document["log"]["checksum"] = "abc"
    assert Manifest.from_json(json.dumps(document).encode(), "k") == MANIFEST


def test_a_newer_version_is_named_and_never_guessed_at():
    document = json.loads(MANIFEST.to_json())
    document["version"] = 3
    with pytest.raises(ManifestVersionError) as newer:
        Manifest.from_json(json.dumps(document).encode(), "t/0/x.rsm-manifest")
    assert str(newer.value) == (
        "t/0/x.rsm-manifest: manifest version 3 is newer than the 2 this remotelog reads"
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[1, 2]",
        b'{"version": 1}',
        b'{"version": "1"}',
        b'{"version": 0, "metadata": {}}',
        json.dumps({**json.loads(MANIFEST.to_json()), "log": {"size": "big"}}).encode(),
        MANIFEST.to_json()[:-20],
    ],
)
def test_a_damaged_manifest_is_reported_with_its_key(raw):
    with pytest.raises(RemoteStorageError) as damaged:
        Manifest.from_json(raw, "t/0/x.rsm-manifest")
    assert not isinstance(damaged.value, ManifestVersionError)
    assert str(damaged.value).startswith("t/0/x.rsm-manifest: unreadable manifest: ")


def test_the_custom_metadata_a_copy_returns_keeps_what_fits():
    keys = SegmentKeys.of("p/", segment(0, 9))
    full = segment_custom_metadata(4296, keys, 128)
    assert json.loads(full) == {"remote_size": 4296, "object_prefix": keys.base}
    assert segment_custom_metadata(4296, keys, 30) == b'{"remote_size":4296}'
    assert segment_custom_metadata(4296, keys, 5) is None


TRANSFORMED = Manifest(
    MANIFEST.metadata,
    4096,
    MANIFEST.indexes,
    SegmentTransforms(
        ChunkIndex(4096, 4096, (1201,)),
        ChunkIndex(4096, 200, (97,)),
        "zstd",
        WrappedDataKey("aws-kms", "arn:aws:kms:eu-west-1:1:key/k", b"\x00wrapped"),
    ),
)


def test_the_documented_fields_of_version_2():
    document = json.loads(TRANSFORMED.to_json())
    assert document["version"] == 2
    assert document["log"] == {"size": 4096}  # the original bytes, as in version 1
    assert document["transforms"] == {
        "compression": "zstd",
        "log_chunks": {"chunk_size": 4096, "size": 4096, "stored_sizes": [1201]},
        "indexes_chunks": {"chunk_size": 4096, "size": 200, "stored_sizes": [97]},
        "encryption": {
            "algorithm": "AES-256-GCM",
            "key_provider": "aws-kms",
            "key_id": "arn:aws:kms:eu-west-1:1:key/k",
            "wrapped_data_key": "AHdyYXBwZWQ=",
        },
    }
    read = Manifest.from_json(TRANSFORMED.to_json(), "k")
    assert read == TRANSFORMED
    assert read.remote_size == 1201 + 97  # what the objects hold


def test_a_plain_segment_is_still_written_as_version_1():
    assert json.loads(MANIFEST.to_json())["version"] == 1
    assert "transforms" not in json.loads(MANIFEST.to_json())


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda t: t["encryption"].update(algorithm="AES-128-CBC"), "encryption algorithm"),
        (lambda t: t.update(compression="brotli"), "unknown compression 'brotli'"),
        (lambda t: t["log_chunks"].update(stored_sizes=[1, 2]), "do not hold 4096 bytes"),
        (lambda t: t.pop("log_chunks"), "log_chunks"),
    ],
)
def test_a_version_2_manifest_it_cannot_follow_is_damaged_by_name(change, says):
    document = json.loads(TRANSFORMED.to_json())
    change(document["transforms"])
    with pytest.raises(RemoteStorageError, match=f"k: unreadable manifest: .*{says}"):
        Manifest.from_json(json.dumps(document).encode(), "k")
