"""Assembly of the partition remover service from its config: clients, leases, progress, server."""

from __future__ import annotations

from contextlib import AsyncExitStack

from remotelog.api.remover.v1 import partition_remover_pb2_grpc as pb_grpc
from remotelog.client import MetadataClient, SegmentStoreClient
from remotelog.client.service_options import service_client_options
from remotelog.coordination.factory import open_leases
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.tasks import in_thread_until_cancelled
from remotelog.metadata.topic import METADATA_TOPIC, await_metadata_topic
from remotelog.remover.config import PartitionRemoverConfig
from remotelog.remover.progress import KafkaGroupProgress
from remotelog.remover.remover import PartitionRemover
from remotelog.remover.servicer import PartitionRemoverServicer
from remotelog.rpc.server import RunningService, start_service

SERVICE_NAME = "remotelog.api.remover.v1.PartitionRemoverService"


async def start_partition_remover(
    config: PartitionRemoverConfig, *, topic: str = METADATA_TOPIC
) -> RunningService[PartitionRemover]:
    client_config = kafka_client_config(config)
    # The metadata manager creates the topic; the remover only checks it is there.
    await in_thread_until_cancelled(
        await_metadata_topic,
        client_config,
        topic=topic,
        partitions=config.metadata_topic_num_partitions,
        retry_interval_ms=100,
        max_timeout_ms=config.rpc_timeout_ms,
    )
    options = service_client_options(
        config, timeout_s=config.rpc_timeout_ms / 1000, backoff=config.backoff()
    )
    async with AsyncExitStack() as stack:
        metadata = MetadataClient(config.metadata_manager_address, options=options)
        stack.push_async_callback(metadata.close)
        store = SegmentStoreClient(config.segment_store_address, options=options)
        stack.push_async_callback(store.close)
        leases = open_leases(config.redis_url)
        stack.push_async_callback(leases.close)
        progress = KafkaGroupProgress(
            client_config,
            topic=topic,
            group_id=config.consumer_group_id,
            timeout_s=config.rpc_timeout_ms / 1000,
        )
        stack.push_async_callback(progress.close)
        remover = PartitionRemover(config, metadata, store, leases, progress, topic=topic)
        stack.push_async_callback(remover.close)
        await remover.start()
        servicer = PartitionRemoverServicer(remover)
        return await start_service(
            config,
            remover,
            lambda s: pb_grpc.add_PartitionRemoverServiceServicer_to_server(servicer, s),  # type: ignore[no-untyped-call]
            [SERVICE_NAME],
            stack.pop_all(),
        )
