"""RemoteLogMetadataSerde byte vectors, derived by hand.

Each expected value is assembled field by field from Kafka's message schemas
(storage/src/main/resources/message/Remote*Record.json, all flexible from
version 0) and the frame of AbstractApiMessageSerde: uvarint frame version 1,
uvarint apiKey, uvarint version. Flexible encoding: compact string/bytes =
uvarint(length + 1) then the bytes (null bytes = 0x00), compact array =
uvarint(count + 1), uuid = 16 bytes most significant first, int8/32/64
big-endian, and every struct ends with its tagged fields: uvarint count, then
(uvarint tag, uvarint size, bytes) for each field whose value is not default.
"""

import dataclasses
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotelog.core.metadata_serde import MetadataParseError, deserialize, serialize
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState, RemotePartitionDeleteState

TOPIC_ID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
SEGMENT_UUID = uuid.UUID("f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f")
TIP = TopicIdPartition(TOPIC_ID, "foo", 3)
SEGMENT_ID = RemoteLogSegmentId(TIP, SEGMENT_UUID)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# TopicIdPartitionEntry {Name string, Id uuid, Partition int32} + empty tags
TIP_BYTES = h("04") + b"foo" + TOPIC_ID.bytes + h("00000003") + h("00")
# RemoteLogSegmentIdEntry {TopicIdPartition, Id uuid} + empty tags
SEGMENT_ID_BYTES = TIP_BYTES + SEGMENT_UUID.bytes + h("00")
# SegmentLeaderEpochs: 2 entries -> uvarint 3; each {LeaderEpoch int32, Offset int64} + tags
EPOCHS_BYTES = (
    h("03")
    + h("00000004 0000000000000064 00")  # epoch 4 from offset 100
    + h("00000005 0000000000000096 00")  # epoch 5 from offset 150
)

SEGMENT = RemoteLogSegmentMetadata(
    remote_log_segment_id=SEGMENT_ID,
    start_offset=100,
    end_offset=199,
    max_timestamp_ms=1_700_000_000_000,
    broker_id=1,
    event_timestamp_ms=1_700_000_000_500,
    segment_size_in_bytes=4096,
    segment_leader_epochs={4: 100, 5: 150},
    custom_metadata=b"abc",
    state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    txn_index_empty=True,
)
SEGMENT_BYTES = (
    h("01 00 00")  # frame version 1, apiKey 0, version 0
    + SEGMENT_ID_BYTES
    + h("0000000000000064")  # StartOffset 100
    + h("00000000000000c7")  # EndOffset 199
    + h("00000001")  # BrokerId 1
    + h("0000018bcfe56800")  # MaxTimestampMs 1_700_000_000_000 = 0x18bcfe56800
    + h("0000018bcfe569f4")  # EventTimestampMs 1_700_000_000_500 = 0x18bcfe569f4
    + EPOCHS_BYTES
    + h("00001000")  # SegmentSizeInBytes 4096
    + h("04")
    + b"abc"  # CustomMetadata: compact nullable bytes, length 3 -> 0x04
    + h("00")  # RemoteLogSegmentState COPY_SEGMENT_STARTED = id 0
    + h("01 00 01 01")  # 1 tagged field: tag 0 (TxnIndexEmpty), size 1, true
)

UPDATE = RemoteLogSegmentMetadataUpdate(
    remote_log_segment_id=SEGMENT_ID,
    event_timestamp_ms=1_700_000_000_500,
    custom_metadata=None,
    state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    broker_id=2,
)
UPDATE_BYTES = (
    h("01 01 00")  # frame version 1, apiKey 1, version 0
    + SEGMENT_ID_BYTES
    + h("00000002")  # BrokerId 2
    + h("0000018bcfe569f4")  # EventTimestampMs
    + h("00")  # CustomMetadata null
    + h("01")  # RemoteLogSegmentState COPY_SEGMENT_FINISHED = id 1
    + h("00")  # no tagged fields
)

DELETE = RemotePartitionDeleteMetadata(
    topic_id_partition=TIP,
    state=RemotePartitionDeleteState.DELETE_PARTITION_FINISHED,
    event_timestamp_ms=1_700_000_000_500,
    broker_id=-1,
)
DELETE_BYTES = (
    h("01 02 00")  # frame version 1, apiKey 2, version 0
    + TIP_BYTES
    + h("ffffffff")  # BrokerId -1
    + h("0000018bcfe569f4")  # EventTimestampMs
    + h("02")  # DELETE_PARTITION_FINISHED = id 2
    + h("00")  # no tagged fields
)

# The snapshot record of the same segment, deleted since, without custom metadata.
SNAPSHOT = RemoteLogSegmentMetadataSnapshot.create(
    dataclasses.replace(
        SEGMENT,
        custom_metadata=None,
        state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
        txn_index_empty=False,
    )
)
SNAPSHOT_BYTES = (
    h("01 03 00")  # frame version 1, apiKey 3, version 0
    + SEGMENT_UUID.bytes  # SegmentId
    + h("0000000000000064 00000000000000c7")  # StartOffset, EndOffset
    + h("00000001")  # BrokerId
    + h("0000018bcfe56800 0000018bcfe569f4")  # MaxTimestampMs, EventTimestampMs
    + EPOCHS_BYTES
    + h("00001000")  # SegmentSizeInBytes
    + h("00")  # CustomMetadata null
    + h("02")  # DELETE_SEGMENT_STARTED = id 2
    + h("00")  # TxnIndexEmpty false is the default: not written
)

VECTORS = [
    pytest.param(SEGMENT, SEGMENT_BYTES, id="segment-metadata"),
    pytest.param(UPDATE, UPDATE_BYTES, id="segment-update"),
    pytest.param(DELETE, DELETE_BYTES, id="partition-delete"),
    pytest.param(SNAPSHOT, SNAPSHOT_BYTES, id="snapshot"),
]


@pytest.mark.parametrize(("value", "expected"), VECTORS)
def test_serialize_matches_hand_derived_bytes(value, expected):
    assert serialize(value) == expected


@pytest.mark.parametrize(("value", "expected"), VECTORS)
def test_deserialize_hand_derived_bytes(value, expected):
    assert deserialize(expected) == value


@pytest.mark.parametrize(("value", "expected"), VECTORS)
def test_version_1_header_with_same_body(value, expected):
    # Version 1 adds only tagged fields with defaults; the body is unchanged.
    v1 = expected[:2] + h("01") + expected[3:]
    assert serialize(value, version=1) == v1
    assert deserialize(v1) == value


def test_version_1_tagged_fields_are_read_and_skipped():
    # UpdateRecord v1: BrokerLeaderEpoch (tag 0, int32 7) and EndOffset (tag 1, int64 199).
    body = UPDATE_BYTES[3:-1] + h("02 00 04 00000007 01 08 00000000000000c7")
    assert deserialize(h("01 01 01") + body) == UPDATE


def test_unknown_tagged_field_is_skipped():
    data = SEGMENT_BYTES[:-4] + h("02 00 01 01 05 02 beef")  # TxnIndexEmpty + unknown tag 5
    assert deserialize(data) == SEGMENT


def test_long_topic_name_uses_multibyte_varint():
    tip = TopicIdPartition(TOPIC_ID, "t" * 200, 0)
    data = serialize(RemotePartitionDeleteMetadata(tip, DELETE.state, 0, 0))
    # length 200 + 1 = 201 = 0b1_1001001 -> 0xc9 0x01
    assert data[3:5] == h("c9 01")
    assert data[5:205] == b"t" * 200


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (h("00 00 00"), "unknown frame version 0"),
        (h("02 00 00"), "unknown frame version 2"),
        (h("01 04 00"), "unknown apiKey 4"),
        (h("01 00 02"), "unsupported version 2 of apiKey 0"),
        (h(""), "truncated: frame version"),
        (h("01 ff ff ff ff ff 01"), "varint longer than 5 bytes"),
        (UPDATE_BYTES + h("00"), "1 byte(s) of garbage after apiKey 1"),
        (UPDATE_BYTES[:-2] + h("09 00"), "unknown RemoteLogSegmentState id 9"),
        (DELETE_BYTES[:-2] + h("03 00"), "unknown RemotePartitionDeleteState id 3"),
        (h("01 02 00 00"), "non-nullable string was serialized as null"),
        (h("01 02 00 04") + b"../" + TOPIC_ID.bytes + h("00000000 00"), "topic"),
        (SEGMENT_BYTES[:-4] + h("01 00 02 0101"), "TxnIndexEmpty tag has 2 bytes"),
    ],
)
def test_bad_bytes_give_a_precise_error(data, message):
    with pytest.raises(MetadataParseError, match=re.escape(message)):
        deserialize(data)


@pytest.mark.parametrize(("value", "expected"), VECTORS)
def test_every_truncation_is_refused(value, expected):
    for cut in range(len(expected)):
        with pytest.raises(MetadataParseError, match=r"truncated|garbage|array|null"):
            deserialize(expected[:cut])


def test_absurd_array_length_is_refused_without_allocating():
    data = SNAPSHOT_BYTES[: 3 + 16 + 8 + 8 + 4 + 8 + 8] + h("ffffffff0f")
    with pytest.raises(MetadataParseError, match="exceeds the remaining bytes"):
        deserialize(data)


uuids = st.uuids()
topics = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=249).filter(
    lambda t: t not in (".", "..")
)
tips = st.builds(TopicIdPartition, uuids, topics, st.integers(0, 2**31 - 1))
int64 = st.integers(-(2**63), 2**63 - 1)
offsets = st.integers(0, 2**62)
epochs = st.dictionaries(st.integers(0, 2**31 - 1), offsets, min_size=1, max_size=5)
blobs = st.none() | st.binary(max_size=300)


@st.composite
def segments(draw):
    start = draw(offsets)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(draw(tips), draw(uuids)),
        start_offset=start,
        end_offset=draw(st.integers(start, 2**63 - 1)),
        max_timestamp_ms=draw(int64),
        broker_id=draw(st.integers(-(2**31), 2**31 - 1)),
        event_timestamp_ms=draw(int64),
        segment_size_in_bytes=draw(st.integers(0, 2**31 - 1)),
        segment_leader_epochs=draw(epochs),
        custom_metadata=draw(blobs),
        state=draw(st.sampled_from(RemoteLogSegmentState)),
        txn_index_empty=draw(st.booleans()),
    )


@given(segments(), st.sampled_from([0, 1]))
def test_round_trip_segments_and_snapshots(segment, version):
    assert deserialize(serialize(segment, version)) == segment
    snapshot = RemoteLogSegmentMetadataSnapshot.create(segment)
    assert deserialize(serialize(snapshot, version)) == snapshot


@given(tips, uuids, int64, blobs, st.sampled_from(RemoteLogSegmentState), st.integers(-1, 9))
def test_round_trip_updates(tip, seg, ts, blob, state, broker):
    update = RemoteLogSegmentMetadataUpdate(RemoteLogSegmentId(tip, seg), ts, blob, state, broker)
    assert deserialize(serialize(update)) == update


@given(tips, st.sampled_from(RemotePartitionDeleteState), int64, st.integers(-1, 9))
def test_round_trip_partition_deletes(tip, state, ts, broker):
    value = RemotePartitionDeleteMetadata(tip, state, ts, broker)
    assert deserialize(serialize(value)) == value


def outcome(data):
    try:
        return deserialize(data)
    except MetadataParseError as exc:
        return exc


@given(st.binary(max_size=200))
def test_random_bytes_decode_or_fail_precisely(data):
    value = outcome(data)
    if isinstance(value, MetadataParseError):
        assert str(value).startswith(("bad metadata record", "unknown", "unsupported", "found"))
    else:
        assert isinstance(
            value,
            RemoteLogSegmentMetadata
            | RemoteLogSegmentMetadataUpdate
            | RemotePartitionDeleteMetadata
            | RemoteLogSegmentMetadataSnapshot,
        )
