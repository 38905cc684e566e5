"""Bytes that are not a valid request, sent to every method of the five real services:
INVALID_ARGUMENT with an ErrorInfo naming the request, and the service still SERVING."""

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from support.rpcs import METHODS, call_raw, error_info, method_path, serving

from remotelog.dev.stack import DevStack

# Field 1, length-delimited, 127 bytes long, cut off after two: no message parses it.
TRUNCATED = b"\x0a\x7f\x00\x00"


@pytest.mark.parametrize(
    ("service", "method"), [pytest.param(*m, id=f"{m[0]}.{m[1].name}") for m in METHODS]
)
def test_a_request_that_is_not_protobuf_is_invalid_argument(
    stack: DevStack, service: str, method: MethodDescriptor
) -> None:
    with grpc.insecure_channel(stack.addresses[service]) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            call_raw(channel, method, [TRUNCATED])
        error = raised.value
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert error.details() == (
            f"request: not a valid {method_path(method)} request message (DecodeError)"
        )
        info = error_info(error)
        assert info is not None
        assert (info.reason, info.domain, info.metadata["field"]) == (
            "INVALID_ARGUMENT",
            "remotelog",
            "request",
        )
        assert serving(channel)
