"""Assembly of the remote fetch service from its config: clients, index cache levels, server."""

from __future__ import annotations

from contextlib import AsyncExitStack

from remotelog.api.fetch.v1 import remote_fetch_pb2 as pb
from remotelog.client import MetadataClient, SegmentStoreClient
from remotelog.client.service_options import service_client_options
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.fetch.direct import DirectSegmentReader
from remotelog.fetch.metrics import register
from remotelog.fetch.redis_index_cache import RedisIndexFiles
from remotelog.fetch.service import RemoteFetch
from remotelog.fetch.servicer import RemoteFetchServicer
from remotelog.rpc.bulk_service import bulk_service
from remotelog.rpc.server import RunningService, start_service
from remotelog.segmentstore.factory import open_segment_store

SERVICE_NAME = "remotelog.api.fetch.v1.RemoteFetchService"
DIRECT_READ_CHUNK_BYTES = 4 * 1024 * 1024


async def start_remote_fetch(config: RemoteFetchConfig) -> RunningService[RemoteFetch]:
    options = service_client_options(
        config,
        timeout_s=config.rpc_timeout_ms / 1000,
        backoff=config.backoff(),
        max_message_bytes=config.grpc_max_message_bytes,
    )
    async with AsyncExitStack() as stack:
        store: SegmentStoreClient | DirectSegmentReader
        if config.direct_storage_read:
            # No message carries these chunks, so they can be as large as a Fetch:
            # a read of one chunk is handed on without being cut (and copied).
            direct = await open_segment_store(
                config, config.backoff(), fetch_chunk_size=DIRECT_READ_CHUNK_BYTES
            )
            store = DirectSegmentReader(direct)
        else:
            store = SegmentStoreClient(
                config.segment_store_address,
                options=options,
                short_circuit_socket=config.segment_store_short_circuit_socket or None,
                fetch_urls=config.segment_store_fetch_urls,
            )
        stack.push_async_callback(store.close)
        metadata = MetadataClient(config.metadata_manager_address, options=options)
        stack.push_async_callback(metadata.close)
        shared = None
        if config.redis_url:
            shared = RedisIndexFiles(config.redis_url, config.index_cache_redis_ttl_ms)
            stack.push_async_callback(shared.close)
        fetch = RemoteFetch(config, store, metadata, second_level=shared)
        stack.push_async_callback(fetch.close)
        await fetch.start()
        stack.callback(register(fetch).close)
        servicer = RemoteFetchServicer(fetch)
        return await start_service(
            config,
            fetch,
            bulk_service(pb.DESCRIPTOR.services_by_name["RemoteFetchService"], servicer),
            [SERVICE_NAME],
            stack.pop_all(),
        )
