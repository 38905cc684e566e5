"""Assembly of the copy scheduler service from its config: clients, leases, scheduler, server."""

from __future__ import annotations

from contextlib import AsyncExitStack

from remotelog.api.scheduler.v1 import copy_scheduler_pb2_grpc as pb_grpc
from remotelog.client import MetadataClient, SegmentStoreClient
from remotelog.client.service_options import service_client_options
from remotelog.coordination.factory import open_leases
from remotelog.rpc.server import RunningService, start_service
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.direct import DirectSegmentWriter
from remotelog.scheduler.scheduler import CopyScheduler
from remotelog.scheduler.servicer import CopySchedulerServicer
from remotelog.segmentstore.factory import open_segment_store

SERVICE_NAME = "remotelog.api.scheduler.v1.CopySchedulerService"
DIRECT_READ_BYTES = 8 * 1024 * 1024


async def start_copy_scheduler(config: CopySchedulerConfig) -> RunningService[CopyScheduler]:
    options = service_client_options(
        config, timeout_s=config.rpc_timeout_ms / 1000, backoff=config.backoff()
    )
    async with AsyncExitStack() as stack:
        store: SegmentStoreClient | DirectSegmentWriter
        if config.direct_storage_write:
            direct = await open_segment_store(
                config, config.backoff(), config.custom_metadata_max_bytes
            )
            # A file that fits one S3 part is read whole and sent as those bytes.
            read_bytes = max(config.s3_multipart_part_size, DIRECT_READ_BYTES)
            store = DirectSegmentWriter(direct, read_bytes)
        else:
            store = SegmentStoreClient(
                config.segment_store_address,
                options=options,
                short_circuit_socket=config.segment_store_short_circuit_socket or None,
            )
        stack.push_async_callback(store.close)
        metadata = MetadataClient(config.metadata_manager_address, options=options)
        stack.push_async_callback(metadata.close)
        leases = open_leases(config.redis_url)
        stack.push_async_callback(leases.close)
        scheduler = CopyScheduler(config, store, metadata, leases)
        stack.push_async_callback(scheduler.close)
        await scheduler.start()
        servicer = CopySchedulerServicer(scheduler)
        return await start_service(
            config,
            scheduler,
            lambda s: pb_grpc.add_CopySchedulerServiceServicer_to_server(servicer, s),  # type: ignore[no-untyped-call]
            [SERVICE_NAME],
            stack.pop_all(),
        )
