from remotelog.api.type.v1 import error_pb2 as _error_pb2
from remotelog.api.type.v1 import segment_pb2 as _segment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MarkPartitionsForDeletionRequest(_message.Message):
    __slots__ = ("partitions", "broker_id")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[_segment_pb2.TopicIdPartition]
    broker_id: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[_segment_pb2.TopicIdPartition, _Mapping]]] = ..., broker_id: _Optional[int] = ...) -> None: ...

class MarkPartitionsForDeletionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeletionStatus(_message.Message):
    __slots__ = ("topic_id_partition", "state", "segments_remaining", "event_timestamp_ms", "last_error_reason", "last_error_message")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_REMAINING_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    state: _segment_pb2.RemotePartitionDeleteState
    segments_remaining: int
    event_timestamp_ms: int
    last_error_reason: _error_pb2.ErrorReason
    last_error_message: str
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., state: _Optional[_Union[_segment_pb2.RemotePartitionDeleteState, str]] = ..., segments_remaining: _Optional[int] = ..., event_timestamp_ms: _Optional[int] = ..., last_error_reason: _Optional[_Union[_error_pb2.ErrorReason, str]] = ..., last_error_message: _Optional[str] = ...) -> None: ...

class GetDeletionStatusRequest(_message.Message):
    __slots__ = ("topic_id_partition",)
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ...) -> None: ...

class GetDeletionStatusResponse(_message.Message):
    __slots__ = ("deletion_status",)
    DELETION_STATUS_FIELD_NUMBER: _ClassVar[int]
    deletion_status: DeletionStatus
    def __init__(self, deletion_status: _Optional[_Union[DeletionStatus, _Mapping]] = ...) -> None: ...

class ListPendingDeletionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPendingDeletionsResponse(_message.Message):
    __slots__ = ("deletion_statuses",)
    DELETION_STATUSES_FIELD_NUMBER: _ClassVar[int]
    deletion_statuses: _containers.RepeatedCompositeFieldContainer[DeletionStatus]
    def __init__(self, deletion_statuses: _Optional[_Iterable[_Union[DeletionStatus, _Mapping]]] = ...) -> None: ...
