"""KIP-405 state machines with Kafka's byte ids and transition rules.

Kafka (`RemoteLogSegmentState.isValidTransition`,
`RemotePartitionDeleteState.isValidTransition`) allows every state to move to
itself, which is what makes retried writes idempotent.
"""

from __future__ import annotations

import enum


class RemoteLogSegmentState(enum.Enum):
    """Lifecycle of a remote segment; the value is Kafka's byte id."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @property
    def id(self) -> int:
        return self.value

    @classmethod
    def for_id(cls, state_id: int) -> RemoteLogSegmentState:
        try:
            return cls(state_id)
        except ValueError:
            raise ValueError(f"unknown RemoteLogSegmentState id {state_id}") from None

    def is_valid_transition(self, target: RemoteLogSegmentState) -> bool:
        return target in _SEGMENT_TRANSITIONS[self]


_S = RemoteLogSegmentState
_SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    _S.COPY_SEGMENT_STARTED: frozenset(
        {_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}
    ),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
}


class RemotePartitionDeleteState(enum.Enum):
    """Lifecycle of a partition deletion; the value is Kafka's byte id."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @property
    def id(self) -> int:
        return self.value

    @classmethod
    def for_id(cls, state_id: int) -> RemotePartitionDeleteState:
        try:
            return cls(state_id)
        except ValueError:
            raise ValueError(f"unknown RemotePartitionDeleteState id {state_id}") from None

    def is_valid_transition(self, target: RemotePartitionDeleteState) -> bool:
        return target in _DELETE_TRANSITIONS[self]


_D = RemotePartitionDeleteState
_DELETE_TRANSITIONS: dict[RemotePartitionDeleteState, frozenset[RemotePartitionDeleteState]] = {
    _D.DELETE_PARTITION_MARKED: frozenset(
        {_D.DELETE_PARTITION_MARKED, _D.DELETE_PARTITION_STARTED}
    ),
    _D.DELETE_PARTITION_STARTED: frozenset(
        {_D.DELETE_PARTITION_STARTED, _D.DELETE_PARTITION_FINISHED}
    ),
    _D.DELETE_PARTITION_FINISHED: frozenset({_D.DELETE_PARTITION_FINISHED}),
}


def is_valid_segment_transition(
    source: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> bool:
    """Kafka's static form: a segment with no state yet may only start a copy."""
    if source is None:
        return target is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    return source.is_valid_transition(target)


def is_valid_partition_delete_transition(
    source: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
) -> bool:
    """Kafka's static form: an unmarked partition may only be marked."""
    if source is None:
        return target is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    return source.is_valid_transition(target)
