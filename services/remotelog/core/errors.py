"""The error hierarchy every remotelog service raises and every client receives.

Each class names its `google.rpc.ErrorInfo` reason (a value of the proto enum
`remotelog.api.type.v1.ErrorReason` without its prefix) and the gRPC status
code by name, so this module needs no grpc import: one server interceptor turns
these into statuses and the clients turn statuses back into these classes.
Shaped after Kafka's RemoteStorageException family.
"""

from __future__ import annotations

from collections.abc import Mapping

ERROR_DOMAIN = "remotelog"
# error.proto's retry rule, which every caller follows: the typed clients, the
# services' own calls and the Kafka plugin. On these codes the same call is
# retried with backoff within the caller's deadline; any other code is final
# for that call.
RETRY_CALL_CODES = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"})
# Retriable in Kafka's sense (its RetriableException), yet final for the call:
# what the caller knows of the partition must change first (a later poll after a
# metadata refresh, as Kafka's consumer does), so repeating the call at once
# would only hold it until its deadline. A recovery of a partition another run holds
# is asked again once that run has ended.
RETRY_LATER_REASONS = frozenset(
    {"UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_LEADER_EPOCH", "RECOVERY_IN_PROGRESS"}
)


class RemoteLogError(Exception):
    """Base of every remotelog error. Unknown faults map to INTERNAL."""

    reason: str = "INTERNAL"
    code: str = "INTERNAL"

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})

    @property
    def retriable(self) -> bool:
        """Kafka's RetriableException: the request may succeed later (error.proto)."""
        return self.code in RETRY_CALL_CODES or self.reason in RETRY_LATER_REASONS

    @classmethod
    def rebuild(cls, message: str, metadata: Mapping[str, str]) -> RemoteLogError:
        """Recreate an error received over the wire (message and ErrorInfo metadata)."""
        error = cls.__new__(cls)
        RemoteLogError.__init__(error, message, metadata=metadata)
        return error


class InvalidArgumentError(RemoteLogError, ValueError):
    """Bad input; `field` names the offending request field."""

    reason = "INVALID_ARGUMENT"
    code = "INVALID_ARGUMENT"

    def __init__(
        self, field: str, message: str, *, metadata: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"{field}: {message}", metadata={**(metadata or {}), "field": field})
        self.field = field
        self.detail = message

    @classmethod
    def rebuild(cls, message: str, metadata: Mapping[str, str]) -> RemoteLogError:
        error = super().rebuild(message, metadata)
        assert isinstance(error, InvalidArgumentError)
        error.field = metadata.get("field", "")
        prefix = f"{error.field}: "
        error.detail = message[len(prefix) :] if message.startswith(prefix) else message
        return error

    def at(self, prefix: str) -> InvalidArgumentError:
        """The same error with its field nested under `prefix`."""
        extra = {k: v for k, v in self.metadata.items() if k != "field"}
        return type(self)(f"{prefix}.{self.field}", self.detail, metadata=extra)


class CorruptRecordError(InvalidArgumentError):
    """Record batch bytes failed validation (CRC-32C mismatch, bad framing)."""

    reason = "CORRUPT_RECORD"


class CustomMetadataSizeLimitExceededError(InvalidArgumentError):
    """KIP-917 custom metadata larger than the configured maximum."""

    reason = "CUSTOM_METADATA_TOO_LARGE"


class RemoteResourceNotFoundError(RemoteLogError):
    """A segment or one of its objects does not exist (Kafka's RemoteResourceNotFoundException)."""

    reason = "SEGMENT_NOT_FOUND"
    code = "NOT_FOUND"


class UnknownTopicOrPartitionError(RemoteLogError):
    """The partition is not known to this service (Kafka's
    UnknownTopicOrPartitionException: retriable, its data may not be tiered yet, or
    retention may have emptied its remote tier until the next segment is copied)."""

    reason = "UNKNOWN_TOPIC_OR_PARTITION"
    code = "NOT_FOUND"


class OffsetOutOfRangeError(RemoteLogError):
    """The offset lies outside the remote tier."""

    reason = "OFFSET_OUT_OF_RANGE"
    code = "OUT_OF_RANGE"


class InvalidStateTransitionError(RemoteLogError):
    """A state change that Kafka's transition rules refuse."""

    reason = "INVALID_STATE_TRANSITION"
    code = "FAILED_PRECONDITION"


class FencedLeaderEpochError(RemoteLogError):
    """The caller's leader epoch has been superseded."""

    reason = "FENCED_LEADER_EPOCH"
    code = "FAILED_PRECONDITION"


class UnknownLeaderEpochError(RemoteLogError):
    """The caller's leader epoch is newer than any the remote tier holds (Kafka's
    UnknownLeaderEpochException: retriable, the data may not be tiered yet)."""

    reason = "UNKNOWN_LEADER_EPOCH"
    code = "FAILED_PRECONDITION"


class PermissionDeniedError(RemoteLogError):
    """The caller's role may not call this method."""

    reason = "PERMISSION_DENIED"
    code = "PERMISSION_DENIED"


class UnauthenticatedError(RemoteLogError):
    """The call shows no identity the service knows: no known bearer token, and no
    client certificate with a role."""

    reason = "UNAUTHENTICATED"
    code = "UNAUTHENTICATED"


class RemoteStorageError(RemoteLogError):
    """The remote storage failed in a way retrying will not fix (Kafka's RemoteStorageException)."""

    reason = "REMOTE_STORAGE_ERROR"
    code = "INTERNAL"


class RetriableRemoteStorageError(RemoteStorageError):
    """Throttling, 5xx, timeouts (Kafka's RetriableRemoteStorageException): retry with backoff."""

    reason = "REMOTE_STORAGE_UNAVAILABLE"
    code = "UNAVAILABLE"


class MetadataNotReadyError(RemoteLogError):
    """The partition's metadata is not caught up yet: retry."""

    reason = "METADATA_NOT_READY"
    code = "UNAVAILABLE"


class MetadataTopicUnavailableError(RemoteLogError):
    """The metadata topic did not confirm a write in time; the write is idempotent: retry."""

    reason = "METADATA_TOPIC_UNAVAILABLE"
    code = "UNAVAILABLE"


class ReaderQueueFullError(RemoteLogError):
    """The remote-fetch reader queue is full: retry later."""

    reason = "READER_QUEUE_FULL"
    code = "RESOURCE_EXHAUSTED"


# The ErrorInfo metadata of an UNSUPPORTED_OPERATION that holds for one segment only (a
# segment stored as chunks has no fetch URL): the caller goes on asking for the others.
SCOPE_KEY = "scope"
SEGMENT_SCOPE = "segment"


class UnsupportedOperationError(RemoteLogError):
    """Not done this way here (a short-circuit fetch from S3): the regular call does it."""

    reason = "UNSUPPORTED_OPERATION"
    code = "UNIMPLEMENTED"


class ReadOnlyMetadataError(RemoteLogError):
    """A write to a metadata manager that only reads the topic, whose one writer is
    another (Kafka's own TopicBasedRemoteLogMetadataManager): no retry changes that."""

    reason = "METADATA_READ_ONLY"
    code = "FAILED_PRECONDITION"


class KafkaUnavailableError(RemoteLogError):
    """The Kafka cluster a service reads for itself did not answer, or answered only in
    part: nothing is decided from it until it answers in full."""

    reason = "KAFKA_UNAVAILABLE"
    code = "UNAVAILABLE"


class RecoveryInProgressError(RemoteLogError):
    """Another `remotelog recover` run holds the partition; its metadata names it."""

    reason = "RECOVERY_IN_PROGRESS"
    code = "FAILED_PRECONDITION"


class ServiceUnavailableError(RemoteLogError):
    """A client-side error: the service could not be reached (no remotelog reason attached)."""

    reason = "UNSPECIFIED"
    code = "UNAVAILABLE"


class DeadlineExceededError(RemoteLogError):
    """A client-side error: the call's deadline passed."""

    reason = "UNSPECIFIED"
    code = "DEADLINE_EXCEEDED"


def _leaf_classes() -> dict[str, type[RemoteLogError]]:
    """Reason -> class, for every class that owns its reason (first definer wins)."""
    by_reason: dict[str, type[RemoteLogError]] = {}
    pending: list[type[RemoteLogError]] = [RemoteLogError]
    while pending:
        cls = pending.pop(0)
        by_reason.setdefault(cls.reason, cls)
        pending.extend(cls.__subclasses__())
    by_reason.pop("UNSPECIFIED", None)
    return by_reason


ERRORS_BY_REASON: Mapping[str, type[RemoteLogError]] = _leaf_classes()


def should_retry_call(exc: BaseException) -> bool:
    """Whether to repeat the call that raised `exc`: error.proto's rule, by code alone."""
    return isinstance(exc, RemoteLogError) and exc.code in RETRY_CALL_CODES
