"""Typed async clients for the remotelog services."""

from remotelog.client.base import ClientOptions, ServiceClient
from remotelog.client.copy_scheduler import CopySchedulerClient, PartitionAssignment
from remotelog.client.errors import from_rpc_error
from remotelog.client.metadata import MetadataClient
from remotelog.client.partition_remover import PartitionDeletionStatus, PartitionRemoverClient
from remotelog.client.remote_fetch import (
    FetchedPartition,
    FetchPartition,
    OffsetAndTimestamp,
    RecordChunk,
    RemoteFetchClient,
)
from remotelog.client.segment_store import SegmentStoreClient
from remotelog.client.tiered_consumer import AtTimestamp, BlockingTieredConsumer, TieredConsumer
from remotelog.core.model import IndexType, LogSegmentData, RemotePartitionSummary
from remotelog.kafka.consumer_records import ConsumerRecord

__all__ = [
    "AtTimestamp",
    "BlockingTieredConsumer",
    "ClientOptions",
    "ConsumerRecord",
    "CopySchedulerClient",
    "FetchPartition",
    "FetchedPartition",
    "IndexType",
    "LogSegmentData",
    "MetadataClient",
    "OffsetAndTimestamp",
    "PartitionAssignment",
    "PartitionDeletionStatus",
    "PartitionRemoverClient",
    "RecordChunk",
    "RemoteFetchClient",
    "RemotePartitionSummary",
    "SegmentStoreClient",
    "ServiceClient",
    "TieredConsumer",
    "from_rpc_error",
]
