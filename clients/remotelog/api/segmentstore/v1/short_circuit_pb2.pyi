from remotelog.api.segmentstore.v1 import segment_store_pb2 as _segment_store_pb2
from remotelog.api.type.v1 import segment_pb2 as _segment_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ShortCircuitRequest(_message.Message):
    __slots__ = ("timeout_ms", "fetch_log_segment", "copy_log_segment_data")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FETCH_LOG_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    COPY_LOG_SEGMENT_DATA_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    fetch_log_segment: _segment_store_pb2.FetchLogSegmentRequest
    copy_log_segment_data: ShortCircuitCopy
    def __init__(self, timeout_ms: _Optional[int] = ..., fetch_log_segment: _Optional[_Union[_segment_store_pb2.FetchLogSegmentRequest, _Mapping]] = ..., copy_log_segment_data: _Optional[_Union[ShortCircuitCopy, _Mapping]] = ...) -> None: ...

class ShortCircuitCopy(_message.Message):
    __slots__ = ("metadata", "files")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    metadata: _segment_pb2.RemoteLogSegmentMetadata
    files: _containers.RepeatedScalarFieldContainer[_segment_store_pb2.SegmentFile]
    def __init__(self, metadata: _Optional[_Union[_segment_pb2.RemoteLogSegmentMetadata, _Mapping]] = ..., files: _Optional[_Iterable[_Union[_segment_store_pb2.SegmentFile, str]]] = ...) -> None: ...

class ShortCircuitResponse(_message.Message):
    __slots__ = ("status", "object_size", "custom_metadata")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OBJECT_SIZE_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    status: bytes
    object_size: int
    custom_metadata: bytes
    def __init__(self, status: _Optional[bytes] = ..., object_size: _Optional[int] = ..., custom_metadata: _Optional[bytes] = ...) -> None: ...
