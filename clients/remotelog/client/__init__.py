"""Typed async clients for the remotelog services.

Each name is imported from its module when first used: a Spark worker that reads
through the tiered consumer does not pay for the other services' clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_MODULES = {
    "AtTimestamp": "remotelog.client.tiered_consumer",
    "BlockingTieredConsumer": "remotelog.client.tiered_consumer",
    "ClientOptions": "remotelog.client.base",
    "ConsumerRecord": "remotelog.kafka.consumer_records",
    "CopySchedulerClient": "remotelog.client.copy_scheduler",
    "FetchPartition": "remotelog.client.remote_fetch",
    "FetchedPartition": "remotelog.client.remote_fetch",
    "IndexType": "remotelog.core.model",
    "LogSegmentData": "remotelog.core.model",
    "MetadataClient": "remotelog.client.metadata",
    "OffsetAndTimestamp": "remotelog.client.remote_fetch",
    "PartitionAssignment": "remotelog.client.copy_scheduler",
    "PartitionDeletionStatus": "remotelog.client.partition_remover",
    "PartitionRemoverClient": "remotelog.client.partition_remover",
    "RecordChunk": "remotelog.client.remote_fetch",
    "RemoteFetchClient": "remotelog.client.remote_fetch",
    "RemotePartitionSummary": "remotelog.core.model",
    "SegmentStoreClient": "remotelog.client.segment_store",
    "ServiceClient": "remotelog.client.base",
    "TieredConsumer": "remotelog.client.tiered_consumer",
    "from_rpc_error": "remotelog.client.errors",
}

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


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)
