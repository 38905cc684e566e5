from remotelog.api.type.v1 import error_pb2 as _error_pb2
from remotelog.api.type.v1 import segment_pb2 as _segment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ISOLATION_LEVEL_UNSPECIFIED: _ClassVar[IsolationLevel]
    ISOLATION_LEVEL_READ_UNCOMMITTED: _ClassVar[IsolationLevel]
    ISOLATION_LEVEL_READ_COMMITTED: _ClassVar[IsolationLevel]
ISOLATION_LEVEL_UNSPECIFIED: IsolationLevel
ISOLATION_LEVEL_READ_UNCOMMITTED: IsolationLevel
ISOLATION_LEVEL_READ_COMMITTED: IsolationLevel

class FetchPartition(_message.Message):
    __slots__ = ("topic_id_partition", "fetch_offset", "partition_max_bytes", "leader_epoch")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    fetch_offset: int
    partition_max_bytes: int
    leader_epoch: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., fetch_offset: _Optional[int] = ..., partition_max_bytes: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("partitions", "isolation_level", "max_wait_ms", "max_bytes", "min_one_message")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIN_ONE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartition]
    isolation_level: IsolationLevel
    max_wait_ms: int
    max_bytes: int
    min_one_message: bool
    def __init__(self, partitions: _Optional[_Iterable[_Union[FetchPartition, _Mapping]]] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., max_wait_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ..., min_one_message: _Optional[bool] = ...) -> None: ...

class AbortedTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...

class FetchPartitionResult(_message.Message):
    __slots__ = ("topic_id_partition", "error_reason", "error_message", "records", "aborted_transactions", "log_start_offset")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    error_reason: _error_pb2.ErrorReason
    error_message: str
    records: bytes
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[AbortedTransaction]
    log_start_offset: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., error_reason: _Optional[_Union[_error_pb2.ErrorReason, str]] = ..., error_message: _Optional[str] = ..., records: _Optional[bytes] = ..., aborted_transactions: _Optional[_Iterable[_Union[AbortedTransaction, _Mapping]]] = ..., log_start_offset: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartitionResult]
    def __init__(self, partitions: _Optional[_Iterable[_Union[FetchPartitionResult, _Mapping]]] = ...) -> None: ...

class ReadOffsetRangeRequest(_message.Message):
    __slots__ = ("topic_id_partition", "start_offset", "end_offset", "chunk_bytes")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    start_offset: int
    end_offset: int
    chunk_bytes: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., chunk_bytes: _Optional[int] = ...) -> None: ...

class ReadOffsetRangeResponse(_message.Message):
    __slots__ = ("records", "first_offset", "last_offset")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    records: bytes
    first_offset: int
    last_offset: int
    def __init__(self, records: _Optional[bytes] = ..., first_offset: _Optional[int] = ..., last_offset: _Optional[int] = ...) -> None: ...

class LocateOffsetRangeRequest(_message.Message):
    __slots__ = ("topic_id_partition", "start_offset", "end_offset", "max_segments", "chunks_accepted")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    start_offset: int
    end_offset: int
    max_segments: int
    chunks_accepted: bool
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., max_segments: _Optional[int] = ..., chunks_accepted: _Optional[bool] = ...) -> None: ...

class SegmentByteRange(_message.Message):
    __slots__ = ("remote_log_segment_metadata", "url", "valid_for_ms", "start_position", "end_position", "chunks")
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    VALID_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    START_POSITION_FIELD_NUMBER: _ClassVar[int]
    END_POSITION_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    url: str
    valid_for_ms: int
    start_position: int
    end_position: int
    chunks: LogChunks
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., url: _Optional[str] = ..., valid_for_ms: _Optional[int] = ..., start_position: _Optional[int] = ..., end_position: _Optional[int] = ..., chunks: _Optional[_Union[LogChunks, _Mapping]] = ...) -> None: ...

class LogChunks(_message.Message):
    __slots__ = ("chunk_size", "stored_sizes", "data_key")
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    STORED_SIZES_FIELD_NUMBER: _ClassVar[int]
    DATA_KEY_FIELD_NUMBER: _ClassVar[int]
    chunk_size: int
    stored_sizes: _containers.RepeatedScalarFieldContainer[int]
    data_key: bytes
    def __init__(self, chunk_size: _Optional[int] = ..., stored_sizes: _Optional[_Iterable[int]] = ..., data_key: _Optional[bytes] = ...) -> None: ...

class LocateOffsetRangeResponse(_message.Message):
    __slots__ = ("segments",)
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    segments: _containers.RepeatedCompositeFieldContainer[SegmentByteRange]
    def __init__(self, segments: _Optional[_Iterable[_Union[SegmentByteRange, _Mapping]]] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("topic_id_partition", "timestamp")
    TOPIC_ID_PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic_id_partition: _segment_pb2.TopicIdPartition
    timestamp: int
    def __init__(self, topic_id_partition: _Optional[_Union[_segment_pb2.TopicIdPartition, _Mapping]] = ..., timestamp: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("offset", "timestamp", "leader_epoch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    timestamp: int
    leader_epoch: int
    def __init__(self, offset: _Optional[int] = ..., timestamp: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...
