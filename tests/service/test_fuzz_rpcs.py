"""Every method of the five real services, fuzzed: well-formed messages with extreme field
values and random bytes. Whatever comes, the answer is never UNKNOWN or INTERNAL, every
error carries an ErrorInfo, the service stays SERVING, and a refused call changes
nothing (the store's files and the metadata manager's partitions are as before).

A bounded run in `make test` (FUZZ_EXAMPLES per method, default 8);
`FUZZ_EXAMPLES=10000 make fuzz` for the long one.
"""

import asyncio
import os
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.rpcs import METHODS, call_raw, error_info, serving

from remotelog.client import MetadataClient
from remotelog.dev.stack import DevStack

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "8"))
# Bad input and states a caller may meet; never the server's own fault.
NEVER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_INTS = {
    FieldDescriptor.TYPE_INT32: _INT32,
    FieldDescriptor.TYPE_SINT32: _INT32,
    FieldDescriptor.TYPE_SFIXED32: _INT32,
    FieldDescriptor.TYPE_INT64: _INT64,
    FieldDescriptor.TYPE_SINT64: _INT64,
    FieldDescriptor.TYPE_SFIXED64: _INT64,
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_STRINGS = st.one_of(
    st.sampled_from(["", "orders", "../etc", "a" * 300, "__remote_log_metadata", "x/y", "\x00"]),
    st.text(max_size=12),
)
_BYTES = st.one_of(
    st.sampled_from([b"", b"\x00" * 16, b"\xff" * 16, b"\x01" * 15]), st.binary(max_size=24)
)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[object]:
    if field.type in _INTS:
        low, high = _INTS[field.type]
        edges = st.sampled_from([0, 1, -1 if low else 2, low, high])
        return st.one_of(edges, st.integers(low, high))
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_STRING:
        return _STRINGS
    if field.type == FieldDescriptor.TYPE_BYTES:
        return _BYTES
    if field.type == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values] + [99])
    return st.floats(allow_nan=True, width=64 if field.type == FieldDescriptor.TYPE_DOUBLE else 32)


def _fill(data: st.DataObject, descriptor: Descriptor, depth: int = 0) -> Message:
    """A message of `descriptor` with a random subset of its fields set, recursively."""
    message = GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not data.draw(st.booleans()):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            continue  # none of the services' requests has a map a caller fills
        count = data.draw(st.integers(0, 3)) if field.is_repeated else 1
        for _ in range(count):
            if field.message_type is not None:
                if depth >= 3:
                    break
                value = _fill(data, field.message_type, depth + 1)
                if field.is_repeated:
                    getattr(message, field.name).add().CopyFrom(value)
                else:
                    getattr(message, field.name).CopyFrom(value)
            elif field.is_repeated:
                getattr(message, field.name).append(data.draw(_scalar(field)))
            else:
                setattr(message, field.name, data.draw(_scalar(field)))
    return message


def _state(stack: DevStack) -> tuple[dict[str, int], list[str]]:
    """What a refused call must leave alone: the store's files (by size) and the
    partitions the metadata manager lists."""
    files = {
        str(p.relative_to(stack.segments_dir)): p.stat().st_size
        for p in Path(stack.segments_dir).rglob("*")
        if p.is_file() and not p.name.endswith(".tmp")
    }
    return files, sorted(str(p) for p in _partitions(stack))


def _partitions(stack: DevStack) -> list[object]:
    async def listed() -> list[object]:
        async with MetadataClient(stack.addresses["metadata-manager"]) as client:
            return list(await client.list_remote_partitions())

    return asyncio.run(listed())


def _check(stack: DevStack, service: str, method: MethodDescriptor, requests: list[bytes]) -> None:
    before = _state(stack)
    with grpc.insecure_channel(stack.addresses[service]) as channel:
        error: grpc.RpcError | None = None
        try:
            call_raw(channel, method, requests, timeout_s=20)
        except grpc.RpcError as raised:
            error = raised
        if error is not None:
            code = error.code()
            assert code not in NEVER, f"{code}: {error.details()}"
            assert code != grpc.StatusCode.DEADLINE_EXCEEDED, "no answer within 20 s"
            info = error_info(error)
            assert info is not None, f"{code} without ErrorInfo: {error.details()}"
            assert info.domain == "remotelog"
            assert _state(stack) == before, f"refused ({code}) yet changed state"
        assert serving(channel)


_METHODS = [pytest.param(*m, id=f"{m[0]}.{m[1].name}") for m in METHODS]
_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="FUZZ_EXAMPLES" not in os.environ,  # the bounded run is the same each time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize(("service", "method"), _METHODS)
@_SETTINGS
@given(data=st.data())
def test_well_formed_messages_with_extreme_values(
    stack: DevStack, service: str, method: MethodDescriptor, data: st.DataObject
) -> None:
    count = data.draw(st.integers(1, 3)) if method.client_streaming else 1
    requests = [_fill(data, method.input_type).SerializeToString() for _ in range(count)]
    _check(stack, service, method, requests)


@pytest.mark.parametrize(("service", "method"), _METHODS)
@_SETTINGS
@given(raw=st.binary(max_size=64))
def test_random_bytes(stack: DevStack, service: str, method: MethodDescriptor, raw: bytes) -> None:
    _check(stack, service, method, [raw])
