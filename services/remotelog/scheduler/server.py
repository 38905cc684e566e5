"""Assembly of the copy scheduler service from its config: clients, leases, scheduler, server."""

from __future__ import annotations

from contextlib import AsyncExitStack

from remotelog.api.scheduler.v1 import copy_scheduler_pb2_grpc as pb_grpc
from remotelog.client import MetadataClient, PartitionRemoverClient, SegmentStoreClient
from remotelog.client.service_options import service_client_options
from remotelog.coordination.factory import open_leases
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.model import TopicIdPartition
from remotelog.rpc.server import RunningService, start_service
from remotelog.scheduler.cluster import KafkaCluster
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.direct import DirectSegmentWriter
from remotelog.scheduler.discovery import PartitionDiscovery
from remotelog.scheduler.scheduler import CopyScheduler
from remotelog.scheduler.servicer import CopySchedulerServicer
from remotelog.segmentstore.factory import open_segment_store

SERVICE_NAME = "remotelog.api.scheduler.v1.CopySchedulerService"
DIRECT_READ_BYTES = 8 * 1024 * 1024
DISCOVERY_MIN_TIMEOUT_S = 5.0


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
        if config.discovery_enabled:
            remover = PartitionRemoverClient(config.partition_remover_address, options=options)
            stack.push_async_callback(remover.close)

            async def mark_for_deletion(partitions: list[TopicIdPartition]) -> None:
                await remover.mark_partitions_for_deletion(
                    partitions, config.broker_id, timeout_s=config.rpc_timeout_ms / 1000
                )

            # A look at the cluster that takes longer than an interval (5 s at least)
            # finds it unreachable.
            looks_s = max(config.discovery_interval_ms / 1000, DISCOVERY_MIN_TIMEOUT_S)
            cluster = KafkaCluster(kafka_client_config(config), looks_s)
            discovery = PartitionDiscovery(
                config, scheduler, cluster, metadata, mark_for_deletion, leases
            )
            # Closed before the scheduler: no hand-over to a scheduler that is stopping.
            stack.push_async_callback(discovery.close)
            await discovery.start()
        servicer = CopySchedulerServicer(scheduler)
        return await start_service(
            config,
            scheduler,
            lambda s: pb_grpc.add_CopySchedulerServiceServicer_to_server(servicer, s),  # type: ignore[no-untyped-call]
            [SERVICE_NAME],
            stack.pop_all(),
        )
