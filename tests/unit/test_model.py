import uuid

import pytest

from remotelog.core.errors import CustomMetadataSizeLimitExceededError, InvalidArgumentError
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    check_custom_metadata_size,
    kafka_uuid_str,
    parse_kafka_uuid,
)

TOPIC_ID = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
TIP = TopicIdPartition(TOPIC_ID, "orders", 3)
SEGMENT_ID = RemoteLogSegmentId(TIP, uuid.UUID(int=42))


def metadata(**overrides):
    fields = {
        "remote_log_segment_id": SEGMENT_ID,
        "start_offset": 100,
        "end_offset": 199,
        "max_timestamp_ms": 1_700_000_000_000,
        "broker_id": 1,
        "event_timestamp_ms": 1_700_000_000_500,
        "segment_size_in_bytes": 4096,
        "segment_leader_epochs": {5: 150, 4: 100},
    }
    fields.update(overrides)
    return RemoteLogSegmentMetadata(**fields)


@pytest.mark.parametrize(
    "topic",
    ["", ".", "..", "../etc", "a/b", "a b", "tópico", "x" * 250, "a\x00b"],
)
def test_kafka_topic_name_rules_refuse(topic):
    with pytest.raises(InvalidArgumentError) as info:
        TopicIdPartition(TOPIC_ID, topic, 0)
    assert info.value.field == "topic"


@pytest.mark.parametrize(
    "topic", ["a", "x" * 249, "my.topic_name-1", "..a", "__remote_log_metadata"]
)
def test_kafka_topic_name_rules_accept(topic):
    assert TopicIdPartition(TOPIC_ID, topic, 0).topic == topic


def test_negative_partition_refused():
    with pytest.raises(InvalidArgumentError, match="partition: -1 is outside"):
        TopicIdPartition(TOPIC_ID, "t", -1)


def test_leader_epochs_are_sorted_by_epoch():
    assert metadata().segment_leader_epochs == ((4, 100), (5, 150))
    assert metadata().leader_epochs == {4: 100, 5: 150}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"start_offset": -1}, "start_offset"),
        ({"end_offset": 99}, "end_offset"),
        ({"segment_size_in_bytes": -5}, "segment_size_in_bytes"),
        ({"segment_size_in_bytes": 2**31}, "segment_size_in_bytes"),
        ({"segment_leader_epochs": {}}, "segment_leader_epochs"),
        ({"segment_leader_epochs": {-1: 100}}, "segment_leader_epochs.leader_epoch"),
        ({"segment_leader_epochs": [(1, 100), (1, 120)]}, "segment_leader_epochs"),
        ({"state": "COPY_SEGMENT_STARTED"}, "state"),
    ],
)
def test_segment_metadata_validation_names_the_field(overrides, field):
    with pytest.raises(InvalidArgumentError) as info:
        metadata(**overrides)
    assert info.value.field == field
    assert info.value.metadata["field"] == field


def test_create_with_updates_takes_state_time_broker_and_custom_metadata():
    update = RemoteLogSegmentMetadataUpdate(
        SEGMENT_ID, 1_700_000_009_000, b"prefix", RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 7
    )
    updated = metadata(custom_metadata=b"old").create_with_updates(update)
    assert updated.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert updated.event_timestamp_ms == 1_700_000_009_000
    assert updated.broker_id == 7
    assert updated.custom_metadata == b"prefix"
    assert (updated.start_offset, updated.end_offset) == (100, 199)


def test_create_with_updates_refuses_another_segment():
    other = RemoteLogSegmentId(TIP, uuid.UUID(int=43))
    update = RemoteLogSegmentMetadataUpdate(
        other, 0, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
    )
    with pytest.raises(InvalidArgumentError, match="remote_log_segment_id"):
        metadata().create_with_updates(update)


def test_custom_metadata_limit():
    check_custom_metadata_size(b"x" * 128, 128)
    check_custom_metadata_size(None, 0)
    with pytest.raises(CustomMetadataSizeLimitExceededError) as info:
        check_custom_metadata_size(b"x" * 129, 128)
    assert info.value.reason == "CUSTOM_METADATA_TOO_LARGE"
    assert info.value.metadata == {"size": "129", "max": "128", "field": "custom_metadata"}


def test_kafka_uuid_string_form():
    # Kafka's Uuid.toString is URL-safe base64 without padding: bytes 00..0f encode
    # to "AAECAwQFBgcICQoLDA0ODw" (base64 of 0x000102...0f, "==" stripped).
    assert kafka_uuid_str(TOPIC_ID) == "AAECAwQFBgcICQoLDA0ODw"
    assert parse_kafka_uuid("AAECAwQFBgcICQoLDA0ODw") == TOPIC_ID
    assert parse_kafka_uuid(str(TOPIC_ID)) == TOPIC_ID
    with pytest.raises(InvalidArgumentError, match="topic_id"):
        parse_kafka_uuid("not-a-uuid", "topic_id")
