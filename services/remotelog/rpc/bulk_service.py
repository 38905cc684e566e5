"""The method handlers of a service with bulk methods, built from its descriptor.

Bulk methods answer with bytes a codec encoded (remotelog.protocol.codecs)
rather than protobuf messages, which would copy every chunk into the message
and again as it is serialized; a bulk request may be read by a decoder that
takes a view of its data. The generated `add_*Servicer_to_server` fixes
protobuf's serializers, so such a service is registered here instead: one
handler per method of the descriptor, each response serializer passing bytes as
they are and serializing messages as before. The wire is the same either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

from remotelog.protocol.codecs import passing_bytes

# A request's bytes -> what the method receives, or None to let protobuf parse them.
RequestDecoder = Callable[[bytes], object | None]

_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def bulk_service(
    service: ServiceDescriptor,
    servicer: object,
    request_decoders: Mapping[str, RequestDecoder] | None = None,
) -> Callable[[grpc.aio.Server], None]:
    """The `register` of start_server for `servicer`, which has a method of each name in
    `service`; `request_decoders`: method name -> a decoder of its requests."""
    decoders = request_decoders or {}
    handlers = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        make = _HANDLERS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=_decoding(decoders.get(method.name), request.FromString),
            response_serializer=passing_bytes(response.SerializeToString),
        )

    def register(server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service.full_name, handlers),)
        )
        server.add_registered_method_handlers(service.full_name, handlers)

    return register


def _decoding(
    decoder: RequestDecoder | None, parse: Callable[[bytes], object]
) -> Callable[[bytes], object]:
    if decoder is None:
        return parse

    def deserializer(raw: bytes) -> object:
        decoded = decoder(raw)
        return parse(raw) if decoded is None else decoded

    return deserializer
