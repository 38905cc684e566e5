"""Every method of the five services, called with raw request bytes, and what an error
must carry: for the tests that throw requests at all of them."""

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remotelog.api.fetch.v1 import remote_fetch_pb2
from remotelog.api.metadata.v1 import metadata_pb2
from remotelog.api.remover.v1 import partition_remover_pb2
from remotelog.api.scheduler.v1 import copy_scheduler_pb2
from remotelog.api.segmentstore.v1 import segment_store_pb2

SERVICES: dict[str, ServiceDescriptor] = {
    "segment-store": segment_store_pb2.DESCRIPTOR.services_by_name["SegmentStoreService"],
    "metadata-manager": metadata_pb2.DESCRIPTOR.services_by_name["RemoteLogMetadataService"],
    "copy-scheduler": copy_scheduler_pb2.DESCRIPTOR.services_by_name["CopySchedulerService"],
    "remote-fetch": remote_fetch_pb2.DESCRIPTOR.services_by_name["RemoteFetchService"],
    "partition-remover": partition_remover_pb2.DESCRIPTOR.services_by_name[
        "PartitionRemoverService"
    ],
}
# (service, method) of every method of every service.
METHODS: list[tuple[str, MethodDescriptor]] = [
    (service, method) for service, descriptor in SERVICES.items() for method in descriptor.methods
]


def method_path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def call_raw(
    channel: grpc.Channel, method: MethodDescriptor, requests: list[bytes], timeout_s: float = 10
) -> None:
    """`requests` sent as `method`'s request (all of them for a request stream, else the
    first), every response read; raises grpc.RpcError as the call ends."""
    shape = (
        ("stream" if method.client_streaming else "unary")
        + "_"
        + ("stream" if method.server_streaming else "unary")
    )
    call = getattr(channel, shape)(
        method_path(method), request_serializer=None, response_deserializer=None
    )
    answer = call(iter(requests) if method.client_streaming else requests[0], timeout=timeout_s)
    if method.server_streaming:
        list(answer)  # every response read: an error mid-stream is raised here


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo in the error's rich status, if it has one."""
    trailers = dict(error.trailing_metadata() or ())
    if "grpc-status-details-bin" not in trailers:
        return None
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    if not status.details or not status.details[0].Unpack(info):
        return None
    return info


def serving(channel: grpc.Channel) -> bool:
    check = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=5
    )
    return check.status == health_pb2.HealthCheckResponse.SERVING
