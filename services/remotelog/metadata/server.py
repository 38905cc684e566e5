"""Assembly of the metadata manager service from its config: manager, gRPC server."""

from __future__ import annotations

from contextlib import AsyncExitStack

from remotelog.api.metadata.v1 import metadata_pb2_grpc as pb_grpc
from remotelog.client import SegmentStoreClient
from remotelog.client.service_options import service_client_options
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager
from remotelog.metadata.servicer import MetadataServicer
from remotelog.metadata.startup import open_metadata_manager
from remotelog.rpc.server import RunningService, start_service

SERVICE_NAME = "remotelog.api.metadata.v1.RemoteLogMetadataService"


async def start_metadata_manager(
    config: MetadataManagerConfig,
) -> RunningService[TopicBasedRemoteLogMetadataManager]:
    async with AsyncExitStack() as stack:
        # The store a recovery's segments are checked against (DescribeLogSegment).
        store = SegmentStoreClient(
            config.segment_store_address, options=service_client_options(config, timeout_s=30)
        )
        stack.push_async_callback(store.close)
        manager = await open_metadata_manager(config, segments=store)
        stack.push_async_callback(manager.close)
        servicer = MetadataServicer(manager)
        return await start_service(
            config,
            manager,
            lambda s: pb_grpc.add_RemoteLogMetadataServiceServicer_to_server(servicer, s),  # type: ignore[no-untyped-call]
            [SERVICE_NAME],
            stack.pop_all(),
        )
