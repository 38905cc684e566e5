"""Errors cross a real grpc.aio server and come back as the same typed exceptions.

A test servicer of RemoteLogMetadataService raises domain errors; the server
is built by remotelog.rpc.server (interceptor + health) on port 0 and called
through remotelog.client's ServiceClient over a real channel.
"""

import asyncio
import importlib
import pkgutil
import re
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.api.metadata.v1 import metadata_pb2 as mpb
from remotelog.api.metadata.v1 import metadata_pb2_grpc as mgrpc
from remotelog.api.type.v1 import error_pb2
from remotelog.client import ServiceClient
from remotelog.core import errors
from remotelog.core.backoff import ExponentialBackoff
from remotelog.core.settings import ServerSettings
from remotelog.protocol import convert
from remotelog.rpc.server import start_server

ERRORS_BY_OFFSET = {
    1: errors.RemoteResourceNotFoundError("segment 1 is gone", metadata={"segment": "1"}),
    2: errors.OffsetOutOfRangeError("offset 2 is beyond the remote tier"),
    3: errors.FencedLeaderEpochError("epoch 3 is fenced"),
    4: errors.ReaderQueueFullError("reader queue full"),
    5: errors.PermissionDeniedError("role reader may not do this"),
    6: errors.RemoteStorageError("bucket policy forbids access"),
}


OUTAGE_THEN_HANG = 7
# GetRemoteLogSegmentMetadata at offset FAIL_ONCE_AT + i fails once with the i-th reason
# of RETRY_RULE, then answers.
FAIL_ONCE_AT = 1000

# error.proto's rule, reason by reason: (gRPC code, the call is repeated,
# retriable in Kafka's sense).
RETRY_RULE = {
    "INVALID_ARGUMENT": ("INVALID_ARGUMENT", False, False),
    "CORRUPT_RECORD": ("INVALID_ARGUMENT", False, False),
    "CUSTOM_METADATA_TOO_LARGE": ("INVALID_ARGUMENT", False, False),
    "SEGMENT_NOT_FOUND": ("NOT_FOUND", False, False),
    "UNKNOWN_TOPIC_OR_PARTITION": ("NOT_FOUND", False, True),
    "OFFSET_OUT_OF_RANGE": ("OUT_OF_RANGE", False, False),
    "METADATA_NOT_READY": ("UNAVAILABLE", True, True),
    "INVALID_STATE_TRANSITION": ("FAILED_PRECONDITION", False, False),
    "FENCED_LEADER_EPOCH": ("FAILED_PRECONDITION", False, False),
    "REMOTE_STORAGE_UNAVAILABLE": ("UNAVAILABLE", True, True),
    "REMOTE_STORAGE_ERROR": ("INTERNAL", False, False),
    "READER_QUEUE_FULL": ("RESOURCE_EXHAUSTED", True, True),
    "PERMISSION_DENIED": ("PERMISSION_DENIED", False, False),
    "INTERNAL": ("INTERNAL", False, False),
    "METADATA_TOPIC_UNAVAILABLE": ("UNAVAILABLE", True, True),
    "UNSUPPORTED_OPERATION": ("UNIMPLEMENTED", False, False),
    "UNKNOWN_LEADER_EPOCH": ("FAILED_PRECONDITION", False, True),
    "UNAUTHENTICATED": ("UNAUTHENTICATED", False, False),
    "METADATA_READ_ONLY": ("FAILED_PRECONDITION", False, False),
    "KAFKA_UNAVAILABLE": ("UNAVAILABLE", True, True),
    "RECOVERY_IN_PROGRESS": ("FAILED_PRECONDITION", False, True),
}
RULE_REASONS = sorted(RETRY_RULE)
# Every package whose modules may define an error a service raises.
SERVICE_PACKAGES = (
    "remotelog.core",
    "remotelog.rpc",
    "remotelog.coordination",
    "remotelog.segmentstore",
    "remotelog.metadata",
    "remotelog.scheduler",
    "remotelog.fetch",
    "remotelog.remover",
    "remotelog.client",
)
ERROR_PROTO = Path(__file__).parents[2] / "protos/remotelog/api/type/v1/error.proto"


class Servicer(mgrpc.RemoteLogMetadataServiceServicer):
    """Answers by request: errors by offset, an outage followed by a hang, ..."""

    def __init__(self):
        self.is_ready_calls = 0
        self.update_calls = 0
        self.outage_calls = 0
        self.fail_once_calls: dict[int, int] = {}

    async def outage_then_hang(self):
        # The first call fails as a store outage the server gave up on; the
        # retry then hangs past the client's deadline.
        self.outage_calls += 1
        if self.outage_calls == 1:
            raise errors.RetriableRemoteStorageError("S3 answered 503 until the deadline")
        await asyncio.sleep(30)

    async def GetRemoteLogSegmentMetadata(self, request, context):
        convert.topic_id_partition_from_proto(request.topic_id_partition)
        if request.offset == OUTAGE_THEN_HANG:
            await self.outage_then_hang()
        if request.offset >= FAIL_ONCE_AT:
            calls = self.fail_once_calls.get(request.offset, 0) + 1
            self.fail_once_calls[request.offset] = calls
            if calls == 1:
                reason = RULE_REASONS[request.offset - FAIL_ONCE_AT]
                raise errors.ERRORS_BY_REASON[reason].rebuild(f"{reason} once", {})
        if request.offset in ERRORS_BY_OFFSET:
            raise ERRORS_BY_OFFSET[request.offset]
        return mpb.GetRemoteLogSegmentMetadataResponse()

    async def AddRemoteLogSegmentMetadata(self, request, context):
        return 1 / 0  # an unexpected fault

    async def UpdateRemoteLogSegmentMetadata(self, request, context):
        self.update_calls += 1
        raise errors.InvalidStateTransitionError("COPY_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED")

    async def IsReady(self, request, context):
        self.is_ready_calls += 1
        if self.is_ready_calls < 3:
            raise errors.MetadataNotReadyError("still loading metadata partition 7")
        return mpb.IsReadyResponse(ready=True)

    async def ListRemoteLogSegments(self, request, context):
        if request.HasField("leader_epoch"):
            await self.outage_then_hang()
        yield mpb.ListRemoteLogSegmentsResponse()
        raise errors.MetadataNotReadyError("partition moved while listing")


@pytest.fixture
async def served():
    servicer = Servicer()
    running = await start_server(
        ServerSettings(listen_address="127.0.0.1:0"),
        lambda server: mgrpc.add_RemoteLogMetadataServiceServicer_to_server(servicer, server),
        ["remotelog.api.metadata.v1.RemoteLogMetadataService"],
    )
    client = ServiceClient(f"127.0.0.1:{running.port}")
    client.options = client.options.__class__(
        timeout_s=5, backoff=ExponentialBackoff(initial_ms=1, max_ms=5, jitter=0)
    )
    stub = mgrpc.RemoteLogMetadataServiceStub(client.channel)
    yield servicer, client, stub, running
    await client.close()
    await running.stop(0)


def tip():
    return mpb.GetRemoteLogSegmentMetadataRequest(
        topic_id_partition={"topic_id": b"\x01" * 16, "topic": "orders", "partition": 0}
    )


@pytest.mark.parametrize("offset", sorted(ERRORS_BY_OFFSET))
async def test_domain_errors_arrive_as_the_same_typed_exception(served, offset):
    _, client, stub, _ = served
    request = tip()
    request.offset = offset
    sent = ERRORS_BY_OFFSET[offset]
    with pytest.raises(errors.RemoteLogError) as info:
        await client.call_unary(stub.GetRemoteLogSegmentMetadata, request, idempotent=False)
    received = info.value
    assert type(received) is type(sent)
    assert received.message == sent.message
    assert received.reason == sent.reason
    assert received.grpc_code == grpc.StatusCode[sent.code]
    assert received.metadata == sent.metadata


async def test_invalid_argument_carries_field_and_bad_request(served):
    _, client, stub, _ = served
    request = tip()
    request.topic_id_partition.topic = "../escape"
    with pytest.raises(errors.InvalidArgumentError) as info:
        await client.call_unary(stub.GetRemoteLogSegmentMetadata, request)
    assert info.value.field == "topic_id_partition.topic"
    assert info.value.grpc_code == grpc.StatusCode.INVALID_ARGUMENT
    # The raw status carries ErrorInfo and BadRequest for non-Python callers too.
    with pytest.raises(grpc.aio.AioRpcError) as raw:
        await stub.GetRemoteLogSegmentMetadata(request)
    details = dict(raw.value.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    info_detail, bad_request = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    assert status.details[0].Unpack(info_detail)
    assert status.details[1].Unpack(bad_request)
    assert info_detail.domain == "remotelog"
    assert info_detail.reason == "INVALID_ARGUMENT"
    assert bad_request.field_violations[0].field == "topic_id_partition.topic"


async def test_every_reason_is_an_error_reason_enum_value():
    enum_names = {
        name.removeprefix("ERROR_REASON_")
        for name in error_pb2.ErrorReason.keys()  # noqa: SIM118 - an EnumTypeWrapper
        if name != "ERROR_REASON_UNSPECIFIED"
    }
    assert set(errors.ERRORS_BY_REASON) == enum_names


def test_every_error_class_in_any_module_names_an_error_reason():
    """Classes beside their service (discovery's) too: ERRORS_BY_REASON only sees those
    defined in core.errors."""
    for package in SERVICE_PACKAGES:
        module = importlib.import_module(package)
        for found in pkgutil.walk_packages(module.__path__, f"{package}."):
            importlib.import_module(found.name)
    classes, pending = set(), [errors.RemoteLogError]
    while pending:
        cls = pending.pop()
        classes.add(cls)
        pending.extend(cls.__subclasses__())
    enum_names = {name.removeprefix("ERROR_REASON_") for name in error_pb2.ErrorReason.keys()}  # noqa: SIM118
    unnamed = {
        f"{c.__module__}.{c.__qualname__}: {c.reason}"
        for c in classes
        if c.reason not in enum_names
    }
    assert unnamed == set()


async def test_unexpected_exception_is_internal_without_details(served, caplog):
    _, client, stub, _ = served
    with pytest.raises(errors.RemoteLogError) as info:
        await client.call_unary(
            stub.AddRemoteLogSegmentMetadata, mpb.AddRemoteLogSegmentMetadataRequest()
        )
    assert info.value.grpc_code == grpc.StatusCode.INTERNAL
    assert info.value.reason == "INTERNAL"
    assert info.value.message.startswith("internal error (incident ")
    assert "ZeroDivisionError" not in info.value.message
    assert any("ZeroDivisionError" in (r.exc_text or "") for r in caplog.records)


async def test_retriable_errors_are_retried_until_success(served):
    servicer, client, stub, _ = served
    response = await client.call_unary(stub.IsReady, mpb.IsReadyRequest())
    assert response.ready is True
    assert servicer.is_ready_calls == 3


async def test_failed_precondition_is_not_retried(served):
    servicer, client, stub, _ = served
    with pytest.raises(errors.InvalidStateTransitionError):
        await client.call_unary(
            stub.UpdateRemoteLogSegmentMetadata, mpb.UpdateRemoteLogSegmentMetadataRequest()
        )
    assert servicer.update_calls == 1


async def test_error_mid_stream_arrives_typed_after_the_first_batch(served):
    _, client, stub, _ = served
    received = []

    async def drain():
        stream = client.call_server_stream(
            stub.ListRemoteLogSegments, mpb.ListRemoteLogSegmentsRequest()
        )
        async for batch in stream:
            received.append(batch)

    with pytest.raises(errors.MetadataNotReadyError, match="partition moved while listing"):
        await drain()
    assert len(received) == 1


async def test_a_retry_cut_by_the_deadline_reports_the_error_that_caused_it(served):
    servicer, client, stub, _ = served
    client.options = client.options.__class__(
        timeout_s=0.5, backoff=ExponentialBackoff(initial_ms=1, max_ms=5, jitter=0)
    )
    request = tip()
    request.offset = OUTAGE_THEN_HANG
    with pytest.raises(errors.RetriableRemoteStorageError, match="503 until the deadline"):
        await client.call_unary(stub.GetRemoteLogSegmentMetadata, request)
    assert servicer.outage_calls == 2

    listing = mpb.ListRemoteLogSegmentsRequest(topic_id_partition=tip().topic_id_partition)
    listing.leader_epoch = 0
    servicer.outage_calls = 0
    with pytest.raises(errors.RetriableRemoteStorageError, match="503 until the deadline"):
        _ = [b async for b in client.call_server_stream(stub.ListRemoteLogSegments, listing)]
    assert servicer.outage_calls == 2


async def test_unreachable_service_is_a_retriable_unavailable():
    client = ServiceClient("127.0.0.1:1")
    client.options = client.options.__class__(
        timeout_s=0.5, backoff=ExponentialBackoff(initial_ms=10, max_ms=50, jitter=0)
    )
    stub = mgrpc.RemoteLogMetadataServiceStub(client.channel)
    try:
        with pytest.raises((errors.ServiceUnavailableError, errors.DeadlineExceededError)) as info:
            await client.call_unary(stub.IsReady, mpb.IsReadyRequest())
        assert info.value.retriable is True
    finally:
        await client.close()


async def test_health_reports_serving_then_not_serving(served):
    _, client, _, running = served
    health = health_pb2_grpc.HealthStub(client.channel)
    name = "remotelog.api.metadata.v1.RemoteLogMetadataService"
    response = await health.Check(health_pb2.HealthCheckRequest(service=name))
    assert response.status == health_pb2.HealthCheckResponse.SERVING
    await running.health.enter_graceful_shutdown()
    response = await health.Check(health_pb2.HealthCheckRequest(service=name))
    assert response.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_request_that_does_not_parse_never_reaches_the_servicer(served):
    servicer, client, _, _ = served
    update = client.channel.unary_unary(
        "/remotelog.api.metadata.v1.RemoteLogMetadataService/UpdateRemoteLogSegmentMetadata",
        request_serializer=None,
        response_deserializer=None,
    )
    with pytest.raises(grpc.aio.AioRpcError) as raw:
        await update(b"\x0a\x7f\x00")  # a length-delimited field cut short
    assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert raw.value.details().startswith("request: not a valid ")
    assert servicer.update_calls == 0


def test_every_reason_has_its_place_in_the_retry_rule():
    assert set(RETRY_RULE) == set(errors.ERRORS_BY_REASON)
    for reason, (code, repeated, retriable) in RETRY_RULE.items():
        error = errors.ERRORS_BY_REASON[reason].rebuild("x", {})
        assert (error.code, errors.should_retry_call(error), error.retriable) == (
            code,
            repeated,
            retriable,
        ), reason


def test_error_proto_names_the_code_of_every_reason():
    text = ERROR_PROTO.read_text()
    for reason, (code, _, _) in RETRY_RULE.items():
        comment = re.search(rf"((?:\n  //[^\n]*)+)\n  ERROR_REASON_{reason} =", text)
        assert comment is not None, reason
        assert re.search(rf"\({code}[;)]", comment.group(1)), (reason, comment.group(1))


@pytest.mark.parametrize("reason", RULE_REASONS)
async def test_a_typed_client_repeats_a_call_exactly_as_the_rule_says(served, reason):
    servicer, client, stub, _ = served
    code, repeated, _ = RETRY_RULE[reason]
    request = tip()
    request.offset = FAIL_ONCE_AT + RULE_REASONS.index(reason)
    if repeated:
        await client.call_unary(stub.GetRemoteLogSegmentMetadata, request)
    else:
        with pytest.raises(errors.RemoteLogError) as info:
            await client.call_unary(stub.GetRemoteLogSegmentMetadata, request)
        assert (info.value.reason, info.value.grpc_code) == (reason, grpc.StatusCode[code])
    assert servicer.fail_once_calls[request.offset] == (2 if repeated else 1)
