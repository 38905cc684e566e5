"""Registering servicers whose methods may answer with already-encoded responses.

Bulk-data methods yield or return `bytes` from `remotelog.protocol.bulk_wire` instead
of protobuf messages, to skip protobuf's copies of each chunk. The generated
`add_*Servicer_to_server` functions fix each method's serializer to
`SerializeToString`; registering through `registering_encoded` wraps every
serializer so bytes pass through as they are and messages are serialized as
before. The wire is the same either way.

Bulk requests (a copy's chunks) go the other way: a method may be given a
decoder that reads the request's bytes itself, answering None for any message
it does not take, which protobuf then parses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from remotelog.protocol import bulk_wire

# A request's bytes -> what the method receives, or None to let protobuf parse them.
RequestDecoder = Callable[[bytes], object | None]


class EncodedResponsesServer:
    """What a generated add_*_to_server function sees in place of the server.

    Generated code registers each service twice: a generic handler, then the
    same method handlers by name. Both registrations are made here, once, from
    the named handlers with their serializers wrapped.
    """

    def __init__(
        self, server: grpc.aio.Server, request_decoders: Mapping[str, RequestDecoder]
    ) -> None:
        self._server = server
        self._request_decoders = request_decoders

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        return None  # registered from add_registered_method_handlers, which follows

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        wrapped = {
            name: handler._replace(
                response_serializer=bulk_wire.passing_bytes(handler.response_serializer),
                request_deserializer=_decoding(
                    self._request_decoders.get(name), handler.request_deserializer
                ),
            )
            for name, handler in method_handlers.items()
        }
        generic = grpc.method_handlers_generic_handler(service_name, wrapped)
        self._server.add_generic_rpc_handlers((generic,))
        self._server.add_registered_method_handlers(service_name, wrapped)


def _decoding(
    decoder: RequestDecoder | None, deserialize: Callable[[bytes], Any]
) -> Callable[[bytes], Any]:
    if decoder is None:
        return deserialize

    def deserializer(raw: bytes) -> Any:
        decoded = decoder(raw)
        return deserialize(raw) if decoded is None else decoded

    return deserializer


def registering_encoded(
    add_to_server: Callable[[Any, Any], None],
    servicer: object,
    request_decoders: Mapping[str, RequestDecoder] | None = None,
) -> Callable[[grpc.aio.Server], None]:
    """The `register` of start_server for `servicer`, its methods accepting encoded responses.

    `request_decoders`: method name -> a decoder of its requests (see the module doc).
    """
    decoders = request_decoders or {}
    return lambda server: add_to_server(servicer, EncodedResponsesServer(server, decoders))
