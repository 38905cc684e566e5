"""Kafka's transition rules, every (source, target) pair spelled out.

Expected tables are transcribed from Kafka's RemoteLogSegmentState and
RemotePartitionDeleteState.isValidTransition: self-transitions valid, the
forward edges listed in their javadoc valid, everything else refused.
"""

import pytest

from remotelog.core.states import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    is_valid_partition_delete_transition,
    is_valid_segment_transition,
)

S = RemoteLogSegmentState
D = RemotePartitionDeleteState
_ = None

# rows: source (None = no state yet); columns: target in Kafka id order.
SEGMENT_TABLE = {
    None: (True, False, False, False),
    S.COPY_SEGMENT_STARTED: (True, True, True, False),
    S.COPY_SEGMENT_FINISHED: (False, True, True, False),
    S.DELETE_SEGMENT_STARTED: (False, False, True, True),
    S.DELETE_SEGMENT_FINISHED: (False, False, False, True),
}
DELETE_TABLE = {
    None: (True, False, False),
    D.DELETE_PARTITION_MARKED: (True, True, False),
    D.DELETE_PARTITION_STARTED: (False, True, True),
    D.DELETE_PARTITION_FINISHED: (False, False, True),
}


@pytest.mark.parametrize("source", list(SEGMENT_TABLE))
@pytest.mark.parametrize("target", list(S))
def test_segment_transitions(source, target):
    expected = SEGMENT_TABLE[source][target.id]
    assert is_valid_segment_transition(source, target) is expected
    if source is not None:
        assert source.is_valid_transition(target) is expected


@pytest.mark.parametrize("source", list(DELETE_TABLE))
@pytest.mark.parametrize("target", list(D))
def test_partition_delete_transitions(source, target):
    expected = DELETE_TABLE[source][target.id]
    assert is_valid_partition_delete_transition(source, target) is expected
    if source is not None:
        assert source.is_valid_transition(target) is expected


def test_kafka_byte_ids():
    assert [s.id for s in S] == [0, 1, 2, 3]
    assert [s.name for s in S] == [
        "COPY_SEGMENT_STARTED",
        "COPY_SEGMENT_FINISHED",
        "DELETE_SEGMENT_STARTED",
        "DELETE_SEGMENT_FINISHED",
    ]
    assert [d.id for d in D] == [0, 1, 2]
    assert S.for_id(2) is S.DELETE_SEGMENT_STARTED
    assert D.for_id(0) is D.DELETE_PARTITION_MARKED


@pytest.mark.parametrize("bad_id", [-1, 4, 127])
def test_unknown_segment_state_id(bad_id):
    with pytest.raises(ValueError, match=f"unknown RemoteLogSegmentState id {bad_id}"):
        S.for_id(bad_id)


def test_unknown_partition_delete_state_id():
    with pytest.raises(ValueError, match="unknown RemotePartitionDeleteState id 3"):
        D.for_id(3)
