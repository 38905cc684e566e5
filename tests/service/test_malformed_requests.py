"""Bytes that are not a valid request, sent to every method of the five real services:
INVALID_ARGUMENT with an ErrorInfo naming the request, the servicer never called, and
the service still SERVING."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.api.fetch.v1 import remote_fetch_pb2
from remotelog.api.metadata.v1 import metadata_pb2
from remotelog.api.remover.v1 import partition_remover_pb2
from remotelog.api.scheduler.v1 import copy_scheduler_pb2
from remotelog.api.segmentstore.v1 import segment_store_pb2
from remotelog.dev.stack import DevConfig, DevStack

SERVICES = {
    "segment-store": segment_store_pb2.DESCRIPTOR.services_by_name["SegmentStoreService"],
    "metadata-manager": metadata_pb2.DESCRIPTOR.services_by_name["RemoteLogMetadataService"],
    "copy-scheduler": copy_scheduler_pb2.DESCRIPTOR.services_by_name["CopySchedulerService"],
    "remote-fetch": remote_fetch_pb2.DESCRIPTOR.services_by_name["RemoteFetchService"],
    "partition-remover": partition_remover_pb2.DESCRIPTOR.services_by_name[
        "PartitionRemoverService"
    ],
}
METHODS = [
    pytest.param(service, method, id=f"{service}.{method.name}")
    for service, descriptor in SERVICES.items()
    for method in descriptor.methods
]
# Field 1, length-delimited, 127 bytes long, cut off after two: no message parses it.
TRUNCATED = b"\x0a\x7f\x00\x00"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    data_dir: Path = tmp_path_factory.mktemp("malformed")
    with DevStack(DevConfig(data_dir)) as running:
        yield running


def call_raw(channel: grpc.Channel, method: MethodDescriptor, raw: bytes) -> None:
    """`raw` sent as the request of `method` (as the only message of a request stream)."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    shape = (
        ("stream" if method.client_streaming else "unary")
        + "_"
        + ("stream" if method.server_streaming else "unary")
    )
    call = getattr(channel, shape)(path, request_serializer=None, response_deserializer=None)
    request = iter([raw]) if method.client_streaming else raw
    answer = call(request, timeout=10)
    if method.server_streaming:
        list(answer)


@pytest.mark.parametrize(("service", "method"), METHODS)
def test_a_request_that_is_not_protobuf_is_invalid_argument(
    stack: DevStack, service: str, method: MethodDescriptor
) -> None:
    with grpc.insecure_channel(stack.addresses[service]) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            call_raw(channel, method, TRUNCATED)
        error = raised.value
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert error.details() == (
            f"request: not a valid /{method.containing_service.full_name}/{method.name} "
            "request message (DecodeError)"
        )
        trailers = dict(error.trailing_metadata())
        status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        info = error_details_pb2.ErrorInfo()
        assert status.details[0].Unpack(info)
        assert (info.reason, info.domain, info.metadata["field"]) == (
            "INVALID_ARGUMENT",
            "remotelog",
            "request",
        )
        check = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        assert check.status == health_pb2.HealthCheckResponse.SERVING
