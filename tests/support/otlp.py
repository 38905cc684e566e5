"""A minimal OTLP/gRPC collector: what services export, kept for tests to read."""

import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Collector(
    trace_service_pb2_grpc.TraceServiceServicer, metrics_service_pb2_grpc.MetricsServiceServicer
):
    def __init__(self) -> None:
        self.traces: list = []
        self.metrics: list = []
        self.received = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def Export(self, request, context):
        with self.received:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self.traces.append(request)
                self.received.notify_all()
                return trace_service_pb2.ExportTraceServiceResponse()
            self.metrics.append(request)
            self.received.notify_all()
            return metrics_service_pb2.ExportMetricsServiceResponse()

    def spans(self) -> list[tuple[dict, object]]:
        """(resource attributes, span) of every span received."""
        out = []
        for request in self.traces:
            for resource_spans in request.resource_spans:
                attributes = {
                    a.key: a.value.string_value for a in resource_spans.resource.attributes
                }
                for scope in resource_spans.scope_spans:
                    out.extend((attributes, span) for span in scope.spans)
        return out

    def stop(self) -> None:
        self._server.stop(0)
