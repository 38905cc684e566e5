"""gRPC errors back into remotelog's typed exceptions (python-api-core's from_grpc_error).

The server side attaches a `google.rpc.ErrorInfo` whose reason names the
exception class; a status without one (connection refused, deadline) maps by
its code alone.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2, status_pb2

from remotelog.core.errors import (
    ERROR_DOMAIN,
    ERRORS_BY_REASON,
    DeadlineExceededError,
    RemoteLogError,
    ServiceUnavailableError,
)

STATUS_DETAILS_KEY = "grpc-status-details-bin"
_BY_CODE: dict[grpc.StatusCode, type[RemoteLogError]] = {
    grpc.StatusCode.UNAVAILABLE: ServiceUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def _error_info_of(status: status_pb2.Status) -> error_details_pb2.ErrorInfo | None:
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == STATUS_DETAILS_KEY:
            return _error_info_of(status_pb2.Status.FromString(value))
    return None


def _typed(
    code: grpc.StatusCode, message: str, info: error_details_pb2.ErrorInfo | None
) -> RemoteLogError:
    if info is not None and info.domain == ERROR_DOMAIN and info.reason in ERRORS_BY_REASON:
        result = ERRORS_BY_REASON[info.reason].rebuild(message, dict(info.metadata))
    else:
        result = _BY_CODE.get(code, RemoteLogError).rebuild(message, {})
        # The class says INTERNAL; the status code is what was actually seen.
        result.code = code.name
    result.grpc_code = code  # type: ignore[attr-defined]
    return result


def from_rpc_error(error: grpc.RpcError) -> RemoteLogError:
    """The typed exception for a failed call; `grpc_code` and `__cause__` keep the original."""
    code: grpc.StatusCode = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message: str = (error.details() if hasattr(error, "details") else None) or code.name
    result = _typed(code, message, _error_info(error))
    result.__cause__ = error
    return result


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def from_status(status: status_pb2.Status) -> RemoteLogError:
    """The typed exception for a `google.rpc.Status` that came without a call (short circuit)."""
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    return _typed(code, status.message or code.name, _error_info_of(status))
