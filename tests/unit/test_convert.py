import subprocess
import sys
import uuid

import pytest

from remotelog.api.type.v1 import segment_pb2 as pb
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState, RemotePartitionDeleteState
from remotelog.protocol import convert

TIP = TopicIdPartition(uuid.UUID(int=7), "orders", 2)
SEGMENT = RemoteLogSegmentMetadata(
    remote_log_segment_id=RemoteLogSegmentId(TIP, uuid.UUID(int=9)),
    start_offset=0,
    end_offset=10,
    max_timestamp_ms=5,
    broker_id=1,
    event_timestamp_ms=6,
    segment_size_in_bytes=100,
    segment_leader_epochs={0: 0, 2: 7},
    custom_metadata=b"",
    state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
    txn_index_empty=True,
)


def test_segment_metadata_round_trip():
    msg = convert.segment_metadata_to_proto(SEGMENT)
    assert msg.state == pb.REMOTE_LOG_SEGMENT_STATE_COPY_SEGMENT_FINISHED
    assert msg.HasField("custom_metadata")  # empty custom metadata is not "absent"
    assert msg.remote_log_segment_id.topic_id_partition.topic_id == TIP.topic_id.bytes
    assert [(e.leader_epoch, e.start_offset) for e in msg.segment_leader_epochs] == [(0, 0), (2, 7)]
    again = convert.segment_metadata_from_proto(
        pb.RemoteLogSegmentMetadata.FromString(msg.SerializeToString())
    )
    assert again == SEGMENT


def test_absent_custom_metadata_stays_absent():
    msg = convert.segment_metadata_to_proto(
        RemoteLogSegmentMetadata(**{**_fields(SEGMENT), "custom_metadata": None})
    )
    assert not msg.HasField("custom_metadata")
    assert convert.segment_metadata_from_proto(msg).custom_metadata is None


def _fields(value):
    return {name: getattr(value, name) for name in value.__slots__}


def test_update_and_partition_delete_round_trip():
    update = RemoteLogSegmentMetadataUpdate(
        SEGMENT.remote_log_segment_id, 9, b"x", RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 3
    )
    assert convert.segment_update_from_proto(convert.segment_update_to_proto(update)) == update
    delete = RemotePartitionDeleteMetadata(
        TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 0
    )
    msg = convert.partition_delete_to_proto(delete)
    assert msg.state == pb.REMOTE_PARTITION_DELETE_STATE_DELETE_PARTITION_MARKED
    assert convert.partition_delete_from_proto(msg) == delete


def test_state_enums_are_kafka_id_plus_one():
    for state in RemoteLogSegmentState:
        assert convert.segment_state_to_proto(state) == state.id + 1
    for state in RemotePartitionDeleteState:
        assert convert.partition_delete_state_to_proto(state) == state.id + 1


def bad_segment(**changes):
    msg = convert.segment_metadata_to_proto(SEGMENT)
    for path, value in changes.items():
        target = msg
        *parents, leaf = path.split("__")
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, leaf, value)
    return msg


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (
            {"remote_log_segment_id__topic_id_partition__topic": "../../etc"},
            "remote_log_segment_metadata.remote_log_segment_id.topic_id_partition.topic",
        ),
        (
            {"remote_log_segment_id__topic_id_partition__topic_id": b"short"},
            "remote_log_segment_metadata.remote_log_segment_id.topic_id_partition.topic_id",
        ),
        (
            {"remote_log_segment_id__id": b""},
            "remote_log_segment_metadata.remote_log_segment_id.id",
        ),
        ({"state": 0}, "remote_log_segment_metadata.state"),
        ({"state": 99}, "remote_log_segment_metadata.state"),
        ({"start_offset": -1}, "remote_log_segment_metadata.start_offset"),
        ({"end_offset": -5}, "remote_log_segment_metadata.end_offset"),
    ],
)
def test_bad_protos_name_the_full_field_path(changes, field):
    with pytest.raises(InvalidArgumentError) as info:
        convert.segment_metadata_from_proto(bad_segment(**changes))
    assert info.value.field == field
    assert str(info.value).startswith(field + ": ")


def test_missing_nested_message_is_required():
    with pytest.raises(InvalidArgumentError) as info:
        convert.segment_metadata_from_proto(pb.RemoteLogSegmentMetadata(state=1))
    assert info.value.field == "remote_log_segment_metadata.remote_log_segment_id"
    assert info.value.detail == "is required"


def test_update_with_unknown_state():
    msg = convert.segment_update_to_proto(
        RemoteLogSegmentMetadataUpdate(
            SEGMENT.remote_log_segment_id, 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1
        )
    )
    msg.state = 5
    with pytest.raises(InvalidArgumentError, match=r"remote_log_segment_metadata_update\.state: 5"):
        convert.segment_update_from_proto(msg)


def test_core_never_imports_grpc():
    code = (
        "import pkgutil, importlib, sys, remotelog.core as core\n"
        "for m in pkgutil.iter_modules(core.__path__):\n"
        "    importlib.import_module('remotelog.core.' + m.name)\n"
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
