from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ERROR_REASON_CORRUPT_RECORD: _ClassVar[ErrorReason]
    ERROR_REASON_CUSTOM_METADATA_TOO_LARGE: _ClassVar[ErrorReason]
    ERROR_REASON_SEGMENT_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorReason]
    ERROR_REASON_OFFSET_OUT_OF_RANGE: _ClassVar[ErrorReason]
    ERROR_REASON_METADATA_NOT_READY: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_STATE_TRANSITION: _ClassVar[ErrorReason]
    ERROR_REASON_FENCED_LEADER_EPOCH: _ClassVar[ErrorReason]
    ERROR_REASON_REMOTE_STORAGE_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_REMOTE_STORAGE_ERROR: _ClassVar[ErrorReason]
    ERROR_REASON_READER_QUEUE_FULL: _ClassVar[ErrorReason]
    ERROR_REASON_PERMISSION_DENIED: _ClassVar[ErrorReason]
    ERROR_REASON_INTERNAL: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_CORRUPT_RECORD: ErrorReason
ERROR_REASON_CUSTOM_METADATA_TOO_LARGE: ErrorReason
ERROR_REASON_SEGMENT_NOT_FOUND: ErrorReason
ERROR_REASON_UNKNOWN_TOPIC_OR_PARTITION: ErrorReason
ERROR_REASON_OFFSET_OUT_OF_RANGE: ErrorReason
ERROR_REASON_METADATA_NOT_READY: ErrorReason
ERROR_REASON_INVALID_STATE_TRANSITION: ErrorReason
ERROR_REASON_FENCED_LEADER_EPOCH: ErrorReason
ERROR_REASON_REMOTE_STORAGE_UNAVAILABLE: ErrorReason
ERROR_REASON_REMOTE_STORAGE_ERROR: ErrorReason
ERROR_REASON_READER_QUEUE_FULL: ErrorReason
ERROR_REASON_PERMISSION_DENIED: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
