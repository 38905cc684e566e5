from remotelog.api.type.v1 import segment_pb2 as _segment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SegmentFile(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEGMENT_FILE_UNSPECIFIED: _ClassVar[SegmentFile]
    SEGMENT_FILE_LOG: _ClassVar[SegmentFile]
    SEGMENT_FILE_OFFSET_INDEX: _ClassVar[SegmentFile]
    SEGMENT_FILE_TIME_INDEX: _ClassVar[SegmentFile]
    SEGMENT_FILE_TRANSACTION_INDEX: _ClassVar[SegmentFile]
    SEGMENT_FILE_PRODUCER_SNAPSHOT: _ClassVar[SegmentFile]
    SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT: _ClassVar[SegmentFile]

class IndexType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INDEX_TYPE_UNSPECIFIED: _ClassVar[IndexType]
    INDEX_TYPE_OFFSET: _ClassVar[IndexType]
    INDEX_TYPE_TIMESTAMP: _ClassVar[IndexType]
    INDEX_TYPE_PRODUCER_SNAPSHOT: _ClassVar[IndexType]
    INDEX_TYPE_TRANSACTION: _ClassVar[IndexType]
    INDEX_TYPE_LEADER_EPOCH: _ClassVar[IndexType]
SEGMENT_FILE_UNSPECIFIED: SegmentFile
SEGMENT_FILE_LOG: SegmentFile
SEGMENT_FILE_OFFSET_INDEX: SegmentFile
SEGMENT_FILE_TIME_INDEX: SegmentFile
SEGMENT_FILE_TRANSACTION_INDEX: SegmentFile
SEGMENT_FILE_PRODUCER_SNAPSHOT: SegmentFile
SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT: SegmentFile
INDEX_TYPE_UNSPECIFIED: IndexType
INDEX_TYPE_OFFSET: IndexType
INDEX_TYPE_TIMESTAMP: IndexType
INDEX_TYPE_PRODUCER_SNAPSHOT: IndexType
INDEX_TYPE_TRANSACTION: IndexType
INDEX_TYPE_LEADER_EPOCH: IndexType

class SegmentDataChunk(_message.Message):
    __slots__ = ("file", "position", "data")
    FILE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    file: SegmentFile
    position: int
    data: bytes
    def __init__(self, file: _Optional[_Union[SegmentFile, str]] = ..., position: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class CopyLogSegmentDataRequest(_message.Message):
    __slots__ = ("metadata", "chunk")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    metadata: _segment_pb2.RemoteLogSegmentMetadata
    chunk: SegmentDataChunk
    def __init__(self, metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., chunk: _Optional[_Union[SegmentDataChunk, _Mapping]] = ...) -> None: ...

class CopyLogSegmentDataResponse(_message.Message):
    __slots__ = ("custom_metadata",)
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    custom_metadata: bytes
    def __init__(self, custom_metadata: _Optional[bytes] = ...) -> None: ...

class FetchLogSegmentRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata", "start_position", "end_position")
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    START_POSITION_FIELD_NUMBER: _ClassVar[int]
    END_POSITION_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    start_position: int
    end_position: int
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., start_position: _Optional[int] = ..., end_position: _Optional[int] = ...) -> None: ...

class FetchLogSegmentResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class FetchIndexRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata", "index_type")
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_TYPE_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    index_type: IndexType
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., index_type: _Optional[_Union[IndexType, str]] = ...) -> None: ...

class FetchIndexResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class DeleteLogSegmentDataRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class DeleteLogSegmentDataResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeLogSegmentRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata",)
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class DescribeLogSegmentResponse(_message.Message):
    __slots__ = ("remote_log_segment_metadata", "custom_metadata")
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    custom_metadata: bytes
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., custom_metadata: _Optional[bytes] = ...) -> None: ...

class GetLogSegmentUrlRequest(_message.Message):
    __slots__ = ("remote_log_segment_metadata", "chunks_accepted")
    REMOTE_LOG_SEGMENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    remote_log_segment_metadata: _segment_pb2.RemoteLogSegmentMetadata
    chunks_accepted: bool
    def __init__(self, remote_log_segment_metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., chunks_accepted: _Optional[bool] = ...) -> None: ...

class GetLogSegmentUrlResponse(_message.Message):
    __slots__ = ("url", "valid_for_ms", "indexes_url", "index_ranges", "chunks")
    URL_FIELD_NUMBER: _ClassVar[int]
    VALID_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_URL_FIELD_NUMBER: _ClassVar[int]
    INDEX_RANGES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    url: str
    valid_for_ms: int
    indexes_url: str
    index_ranges: _containers.RepeatedCompositeFieldContainer[IndexRange]
    chunks: SegmentChunks
    def __init__(self, url: _Optional[str] = ..., valid_for_ms: _Optional[int] = ..., indexes_url: _Optional[str] = ..., index_ranges: _Optional[_Iterable[_Union[IndexRange, _Mapping]]] = ..., chunks: _Optional[_Union[SegmentChunks, _Mapping]] = ...) -> None: ...

class SegmentChunks(_message.Message):
    __slots__ = ("chunk_size", "log_stored_sizes", "indexes_size", "indexes_stored_sizes", "data_key")
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOG_STORED_SIZES_FIELD_NUMBER: _ClassVar[int]
    INDEXES_SIZE_FIELD_NUMBER: _ClassVar[int]
    INDEXES_STORED_SIZES_FIELD_NUMBER: _ClassVar[int]
    DATA_KEY_FIELD_NUMBER: _ClassVar[int]
    chunk_size: int
    log_stored_sizes: _containers.RepeatedScalarFieldContainer[int]
    indexes_size: int
    indexes_stored_sizes: _containers.RepeatedScalarFieldContainer[int]
    data_key: bytes
    def __init__(self, chunk_size: _Optional[int] = ..., log_stored_sizes: _Optional[_Iterable[int]] = ..., indexes_size: _Optional[int] = ..., indexes_stored_sizes: _Optional[_Iterable[int]] = ..., data_key: _Optional[bytes] = ...) -> None: ...

class IndexRange(_message.Message):
    __slots__ = ("index_type", "position", "size")
    INDEX_TYPE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    index_type: IndexType
    position: int
    size: int
    def __init__(self, index_type: _Optional[_Union[IndexType, str]] = ..., position: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class SegmentFilePath(_message.Message):
    __slots__ = ("file", "path", "size")
    FILE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    file: SegmentFile
    path: str
    size: int
    def __init__(self, file: _Optional[_Union[SegmentFile, str]] = ..., path: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class CopyLogSegmentFilesRequest(_message.Message):
    __slots__ = ("metadata", "files", "inline_files")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    INLINE_FILES_FIELD_NUMBER: _ClassVar[int]
    metadata: _segment_pb2.RemoteLogSegmentMetadata
    files: _containers.RepeatedCompositeFieldContainer[SegmentFilePath]
    inline_files: _containers.RepeatedCompositeFieldContainer[SegmentDataChunk]
    def __init__(self, metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., files: _Optional[_Iterable[_Union[SegmentFilePath, _Mapping]]] = ..., inline_files: _Optional[_Iterable[_Union[SegmentDataChunk, _Mapping]]] = ...) -> None: ...

class CopyLogSegmentFilesResponse(_message.Message):
    __slots__ = ("custom_metadata",)
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    custom_metadata: bytes
    def __init__(self, custom_metadata: _Optional[bytes] = ...) -> None: ...

class SegmentFileSize(_message.Message):
    __slots__ = ("file", "size")
    FILE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    file: SegmentFile
    size: int
    def __init__(self, file: _Optional[_Union[SegmentFile, str]] = ..., size: _Optional[int] = ...) -> None: ...

class PrepareSegmentUploadRequest(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _segment_pb2.RemoteLogSegmentMetadata
    def __init__(self, metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ...) -> None: ...

class PrepareSegmentUploadResponse(_message.Message):
    __slots__ = ("transforms",)
    TRANSFORMS_FIELD_NUMBER: _ClassVar[int]
    transforms: UploadTransforms
    def __init__(self, transforms: _Optional[_Union[UploadTransforms, _Mapping]] = ...) -> None: ...

class UploadTransforms(_message.Message):
    __slots__ = ("chunk_size", "compression_enabled", "zstd_level", "compression_heuristic_enabled", "data_key", "wrapped_data_key")
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_ENABLED_FIELD_NUMBER: _ClassVar[int]
    ZSTD_LEVEL_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_HEURISTIC_ENABLED_FIELD_NUMBER: _ClassVar[int]
    DATA_KEY_FIELD_NUMBER: _ClassVar[int]
    WRAPPED_DATA_KEY_FIELD_NUMBER: _ClassVar[int]
    chunk_size: int
    compression_enabled: bool
    zstd_level: int
    compression_heuristic_enabled: bool
    data_key: bytes
    wrapped_data_key: WrappedDataKey
    def __init__(self, chunk_size: _Optional[int] = ..., compression_enabled: _Optional[bool] = ..., zstd_level: _Optional[int] = ..., compression_heuristic_enabled: _Optional[bool] = ..., data_key: _Optional[bytes] = ..., wrapped_data_key: _Optional[_Union[WrappedDataKey, _Mapping]] = ...) -> None: ...

class WrappedDataKey(_message.Message):
    __slots__ = ("key_provider", "key_id", "wrapped")
    KEY_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    WRAPPED_FIELD_NUMBER: _ClassVar[int]
    key_provider: str
    key_id: str
    wrapped: bytes
    def __init__(self, key_provider: _Optional[str] = ..., key_id: _Optional[str] = ..., wrapped: _Optional[bytes] = ...) -> None: ...

class UploadedChunks(_message.Message):
    __slots__ = ("chunk_size", "log_stored_sizes", "indexes_stored_sizes", "compressed", "wrapped_data_key")
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOG_STORED_SIZES_FIELD_NUMBER: _ClassVar[int]
    INDEXES_STORED_SIZES_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_FIELD_NUMBER: _ClassVar[int]
    WRAPPED_DATA_KEY_FIELD_NUMBER: _ClassVar[int]
    chunk_size: int
    log_stored_sizes: _containers.RepeatedScalarFieldContainer[int]
    indexes_stored_sizes: _containers.RepeatedScalarFieldContainer[int]
    compressed: bool
    wrapped_data_key: WrappedDataKey
    def __init__(self, chunk_size: _Optional[int] = ..., log_stored_sizes: _Optional[_Iterable[int]] = ..., indexes_stored_sizes: _Optional[_Iterable[int]] = ..., compressed: _Optional[bool] = ..., wrapped_data_key: _Optional[_Union[WrappedDataKey, _Mapping]] = ...) -> None: ...

class StartSegmentUploadRequest(_message.Message):
    __slots__ = ("metadata", "files", "copy_timeout_ms", "log_parts", "indexes_md5", "chunks")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    COPY_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_PARTS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_MD5_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    metadata: _segment_pb2.RemoteLogSegmentMetadata
    files: _containers.RepeatedCompositeFieldContainer[SegmentFileSize]
    copy_timeout_ms: int
    log_parts: _containers.RepeatedCompositeFieldContainer[UploadedPart]
    indexes_md5: str
    chunks: UploadedChunks
    def __init__(self, metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., files: _Optional[_Iterable[_Union[SegmentFileSize, _Mapping]]] = ..., copy_timeout_ms: _Optional[int] = ..., log_parts: _Optional[_Iterable[_Union[UploadedPart, _Mapping]]] = ..., indexes_md5: _Optional[str] = ..., chunks: _Optional[_Union[UploadedChunks, _Mapping]] = ...) -> None: ...

class UploadPart(_message.Message):
    __slots__ = ("part_number", "position", "size", "url")
    PART_NUMBER_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    part_number: int
    position: int
    size: int
    url: str
    def __init__(self, part_number: _Optional[int] = ..., position: _Optional[int] = ..., size: _Optional[int] = ..., url: _Optional[str] = ...) -> None: ...

class StartSegmentUploadResponse(_message.Message):
    __slots__ = ("upload_id", "log_parts", "indexes_url", "index_order", "valid_for_ms", "indexes_headers")
    class IndexesHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_PARTS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_URL_FIELD_NUMBER: _ClassVar[int]
    INDEX_ORDER_FIELD_NUMBER: _ClassVar[int]
    VALID_FOR_MS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_HEADERS_FIELD_NUMBER: _ClassVar[int]
    upload_id: str
    log_parts: _containers.RepeatedCompositeFieldContainer[UploadPart]
    indexes_url: str
    index_order: _containers.RepeatedScalarFieldContainer[SegmentFile]
    valid_for_ms: int
    indexes_headers: _containers.ScalarMap[str, str]
    def __init__(self, upload_id: _Optional[str] = ..., log_parts: _Optional[_Iterable[_Union[UploadPart, _Mapping]]] = ..., indexes_url: _Optional[str] = ..., index_order: _Optional[_Iterable[_Union[SegmentFile, str]]] = ..., valid_for_ms: _Optional[int] = ..., indexes_headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UploadedPart(_message.Message):
    __slots__ = ("part_number", "size", "md5")
    PART_NUMBER_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MD5_FIELD_NUMBER: _ClassVar[int]
    part_number: int
    size: int
    md5: str
    def __init__(self, part_number: _Optional[int] = ..., size: _Optional[int] = ..., md5: _Optional[str] = ...) -> None: ...

class CompleteSegmentUploadRequest(_message.Message):
    __slots__ = ("metadata", "upload_id", "files", "log_parts", "indexes_md5", "chunks")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    LOG_PARTS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_MD5_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    metadata: _segment_pb2.RemoteLogSegmentMetadata
    upload_id: str
    files: _containers.RepeatedCompositeFieldContainer[SegmentFileSize]
    log_parts: _containers.RepeatedCompositeFieldContainer[UploadedPart]
    indexes_md5: str
    chunks: UploadedChunks
    def __init__(self, metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., upload_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[SegmentFileSize, _Mapping]]] = ..., log_parts: _Optional[_Iterable[_Union[UploadedPart, _Mapping]]] = ..., indexes_md5: _Optional[str] = ..., chunks: _Optional[_Union[UploadedChunks, _Mapping]] = ...) -> None: ...

class CompleteSegmentUploadResponse(_message.Message):
    __slots__ = ("custom_metadata",)
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    custom_metadata: bytes
    def __init__(self, custom_metadata: _Optional[bytes] = ...) -> None: ...

class AbortSegmentUploadRequest(_message.Message):
    __slots__ = ("metadata", "upload_id")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    metadata: _segment_pb2.RemoteLogSegmentMetadata
    upload_id: str
    def __init__(self, metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., upload_id: _Optional[str] = ...) -> None: ...

class AbortSegmentUploadResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
