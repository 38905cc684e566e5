from remotelog.api.type.v1 import segment_pb2 as _segment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddRemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class AddRemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateRemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata_update",)
    REMOTE_LOG_SEGMENT_METADATA_UPDATE_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata_update: _segment_pb2.RemoteLogSegmentMetadataUpdate
    def __init__(self, remote_log_segment_metadata_update: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadataUpdate, _Mapping]] = ...) -> None: ...

class UpdateRemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PutRemotePartitionDeleteMetadataRequest(_message.Message):
    __slots__ = ("remote_partition_delete_metadata",)
    REMOTE_PARTITION_DELETE_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_partition_delete_metadata: _segment_pb2.RemotePartitionDeleteMetadata
    def __init__(self, remote_partition_delete_metadata: _Optional[_Union[_segment_pb2.RemotePartitionDeleteMetadata, _Mapping]] = ...) -> None: ...

class PutRemotePartitionDeleteMetadataResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetRemotePartitionDeleteStateRequest(_message.Message):
    __slots__ = ("topic_id_partition",)
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ...) -> None: ...

class GetRemotePartitionDeleteStateResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _segment_pb2.RemotePartitionDeleteState
    def __init__(self, state: _Optional[_Union[_segment_pb2.RemotePartitionDeleteState, str]] = ...) -> None: ...

class GetRemoteLogSegmentMetadataRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch", "offset")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    leader_epoch: int
    offset: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GetRemoteLogSegmentMetadataResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class GetHighestOffsetForEpochRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    leader_epoch: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class GetHighestOffsetForEpochResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class ListRemoteLogSegmentsRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    leader_epoch: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class ListRemoteLogSegmentsResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _containers.RepeatedCompositeFieldContainer[_segment_pb2.RemoteLogSegmentMetadata]
    def __init__(self, remote_log_segment_metadata: _Optional[_Iterable[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]]] = ...) -> None: ...

class GetRemoteLogSizeRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    leader_epoch: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class GetRemoteLogSizeResponse(_message.Message):
    __slots__ = ("remote_log_size_bytes",)
    REMOTE_LOG_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    remote_log_size_bytes: int
    def __init__(self, remote_log_size_bytes: _Optional[int] = ...) -> None: ...

class GetNextSegmentWithTxnIndexRequest(_message.Message):
    __slots__ = ("topic_id_partition", "leader_epoch", "offset")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    leader_epoch: int
    offset: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., leader_epoch: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GetNextSegmentWithTxnIndexResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class OnPartitionLeadershipChangesRequest(_message.Message):
    __slots__ = ("leader_partitions", "follower_partitions")
    LEADER_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FOLLOWER_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    leader_partitions: _containers.RepeatedCompositeFieldContainer[_segment_pb2.TopicIdPartition]
    follower_partitions: _containers.RepeatedCompositeFieldContainer[_segment_pb2.TopicIdPartition]
    def __init__(self, leader_partitions: _Optional[_Iterable[_Union[_segment_pb2.TopicIdPartition, _Mapping]]] = ..., follower_partitions: _Optional[_Iterable[_Union[_segment_pb2.TopicIdPartition, _Mapping]]] = ...) -> None: ...

class OnPartitionLeadershipChangesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OnStopPartitionsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[_segment_pb2.TopicIdPartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[_segment_pb2.TopicIdPartition, _Mapping]]] = ...) -> None: ...

class OnStopPartitionsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsReadyRequest(_message.Message):
    __slots__ = ("topic_id_partition",)
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ...) -> None: ...

class IsReadyResponse(_message.Message):
    __slots__ = ("ready",)
    READY_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    def __init__(self, ready: _Optional[bool] = ...) -> None: ...

class ListRemotePartitionsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ListRemotePartitionsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[RemotePartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[RemotePartition, _Mapping]]] = ...) -> None: ...

class RemotePartition(_message.Message):
    __slots__ = ("topic_id_partition", "earliest_offset", "latest_tiered_offset", "remote_bytes", "segment_count")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LATEST_TIERED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REMOTE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    earliest_offset: int
    latest_tiered_offset: int
    remote_bytes: int
    segment_count: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., earliest_offset: _Optional[int] = ..., latest_tiered_offset: _Optional[int] = ..., remote_bytes: _Optional[int] = ..., segment_count: _Optional[int] = ...) -> None: ...

class RecoverRemoteLogSegmentsRequest(_message.Message):
    __slots__ = ("topic_id_partition", "recovery", "dry_run", "remote_log_segment_metadata")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    recovery: str
    dry_run: bool
    remote_log_segment_metadata: _containers.RepeatedCompositeFieldContainer[_segment_pb2.RemoteLogSegmentMetadata]
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., recovery: _Optional[str] = ..., dry_run: _Optional[bool] = ..., remote_log_segment_metadata: _Optional[_Iterable[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]]] = ...) -> None: ...

class RecoverRemoteLogSegmentsResponse(_message.Message):
    __slots__ = ("written", "completed")
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    written: _containers.RepeatedCompositeFieldContainer[_segment_pb2.RemoteLogSegmentId]
    completed: _containers.RepeatedCompositeFieldContainer[_segment_pb2.RemoteLogSegmentId]
    def __init__(self, written: _Optional[_Iterable[_Union[_segment_pb2.RemoteLogSegmentId, _Mapping]]] = ..., completed: _Optional[_Iterable[_Union[_segment_pb2.RemoteLogSegmentId, _Mapping]]] = ...) -> None: ...
