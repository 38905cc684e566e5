from remotelog.api.type.v1 import error_pb2 as _error_pb2
from remotelog.api.type.v1 import segment_pb2 as _segment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartitionRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARTITION_ROLE_UNSPECIFIED: _ClassVar[PartitionRole]
    PARTITION_ROLE_LEADER: _ClassVar[PartitionRole]
    PARTITION_ROLE_FOLLOWER: _ClassVar[PartitionRole]
PARTITION_ROLE_UNSPECIFIED: PartitionRole
PARTITION_ROLE_LEADER: PartitionRole
PARTITION_ROLE_FOLLOWER: PartitionRole

class PartitionAssignment(_message.Message):
    __slots__ = ("topic_id_partition", "log_dir", "leader_epoch", "retention_ms", "retention_bytes", "local_retention_ms", "local_retention_bytes")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_DIR_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    log_dir: str
    leader_epoch: int
    retention_ms: int
    retention_bytes: int
    local_retention_ms: int
    local_retention_bytes: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., log_dir: _Optional[str] = ..., leader_epoch: _Optional[int] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., local_retention_ms: _Optional[int] = ..., local_retention_bytes: _Optional[int] = ...) -> None: ...

class OnPartitionLeadershipChangesRequest(_message.Message):
    __slots__ = ("leaders", "followers")
    LEADERS_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    leaders: _containers.RepeatedCompositeFieldContainer[PartitionAssignment]
    followers: _containers.RepeatedCompositeFieldContainer[PartitionAssignment]
    def __init__(self, leaders: _Optional[_Iterable[_Union[PartitionAssignment, _Mapping]]] = ..., followers: _Optional[_Iterable[_Union[PartitionAssignment, _Mapping]]] = ...) -> None: ...

class OnPartitionLeadershipChangesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StopPartition(_message.Message):
    __slots__ = ("topic_id_partition", "delete_remote_log")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    DELETE_REMOTE_LOG_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    delete_remote_log: bool
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., delete_remote_log: _Optional[bool] = ...) -> None: ...

class StopPartitionsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[StopPartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[StopPartition, _Mapping]]] = ...) -> None: ...

class StopPartitionsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateLogStartOffsetRequest(_message.Message):
    __slots__ = ("topic_id_partition", "log_start_offset")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    log_start_offset: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class UpdateLogStartOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetPartitionStateRequest(_message.Message):
    __slots__ = ("topic_id_partition",)
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ...) -> None: ...

class PartitionState(_message.Message):
    __slots__ = ("topic_id_partition", "role", "highest_tiered_offset", "local_log_start_offset", "log_start_offset", "copy_lag_bytes", "copy_lag_segments", "last_error_reason", "last_error_message", "next_run_time_ms", "effective_retention_ms", "effective_retention_bytes", "effective_local_retention_ms", "effective_local_retention_bytes", "segments_deleted_before_tiering", "copy_lag_ms")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_TIERED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOCAL_LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COPY_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    COPY_LAG_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_LOCAL_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_LOCAL_RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_DELETED_BEFORE_TIERING_FIELD_NUMBER: _ClassVar[int]
    COPY_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    role: PartitionRole
    highest_tiered_offset: int
    local_log_start_offset: int
    log_start_offset: int
    copy_lag_bytes: int
    copy_lag_segments: int
    last_error_reason: _error_pb2.ErrorReason
    last_error_message: str
    next_run_time_ms: int
    effective_retention_ms: int
    effective_retention_bytes: int
    effective_local_retention_ms: int
    effective_local_retention_bytes: int
    segments_deleted_before_tiering: int
    copy_lag_ms: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., role: _Optional[_Union[PartitionRole, str]] = ..., highest_tiered_offset: _Optional[int] = ..., local_log_start_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., copy_lag_bytes: _Optional[int] = ..., copy_lag_segments: _Optional[int] = ..., last_error_reason: _Optional[_Union[_error_pb2.ErrorReason, str]] = ..., last_error_message: _Optional[str] = ..., next_run_time_ms: _Optional[int] = ..., effective_retention_ms: _Optional[int] = ..., effective_retention_bytes: _Optional[int] = ..., effective_local_retention_ms: _Optional[int] = ..., effective_local_retention_bytes: _Optional[int] = ..., segments_deleted_before_tiering: _Optional[int] = ..., copy_lag_ms: _Optional[int] = ...) -> None: ...

class GetPartitionStateResponse(_message.Message):
    __slots__ = ("partition_state",)
    PARTITION_STATE_FIELD_NUMBER: _ClassVar[int]
    partition_state: PartitionState
    def __init__(self, partition_state: _Optional[_Union[PartitionState, _Mapping]] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic_id_partition", "timestamp")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    timestamp: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., timestamp: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("offset", "leader_epoch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    leader_epoch: int
    def __init__(self, offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...
