"""Assembly of the segment store service from its config: backend, store, gRPC server."""

from __future__ import annotations

from contextlib import AsyncExitStack

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.rpc.bulk_service import bulk_service
from remotelog.rpc.server import RunningService, start_service
from remotelog.segmentstore.abandoned_uploads import AbandonedUploads
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.direct_copy import DirectCopies, allowed_roots
from remotelog.segmentstore.factory import open_segment_store
from remotelog.segmentstore.servicer import SegmentStoreServicer, decode_copy_request
from remotelog.segmentstore.short_circuit import ShortCircuitServer
from remotelog.segmentstore.store import SegmentStore

SERVICE_NAME = "remotelog.api.segmentstore.v1.SegmentStoreService"


async def start_segment_store(config: SegmentStoreConfig) -> RunningService[SegmentStore]:
    async with AsyncExitStack() as stack:
        store = await open_segment_store(
            config,
            config.backoff(),
            config.custom_metadata_max_bytes,
            data_keys_over_tls=bool(config.tls_cert_file),
        )
        stack.push_async_callback(store.close)
        if config.short_circuit_socket_path:
            short_circuit = ShortCircuitServer(config.short_circuit_socket_path, store)
            await short_circuit.start()
            stack.push_async_callback(short_circuit.close)
        abort_after_s = config.incomplete_uploads_abort_after_ms / 1000
        if abort_after_s:
            abandoned = AbandonedUploads(store.objects, config.key_prefix, after_s=abort_after_s)
            abandoned.start()
            stack.push_async_callback(abandoned.close)
        direct = DirectCopies(
            store,
            allowed_paths=allowed_roots(config.copy_paths_allowed),
            upload_urls=config.storage_backend != "filesystem" and config.s3_copy_urls,
            abort_uploads_after_s=abort_after_s,
        )
        servicer = SegmentStoreServicer(
            store, direct, copy_chunk_max_bytes=config.copy_chunk_max_bytes
        )
        return await start_service(
            config,
            store,
            bulk_service(
                pb.DESCRIPTOR.services_by_name["SegmentStoreService"],
                servicer,
                {"CopyLogSegmentData": decode_copy_request},
            ),
            [SERVICE_NAME],
            stack.pop_all(),
        )
