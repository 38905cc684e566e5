"""The services the CLI knows, by their command-line names."""

from __future__ import annotations

from remotelog.core.config import config_fields
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.remover.config import PartitionRemoverConfig
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.segmentstore.config import SegmentStoreConfig

SERVICE_CONFIGS: dict[str, type] = {
    "segment-store": SegmentStoreConfig,
    "metadata-manager": MetadataManagerConfig,
    "copy-scheduler": CopySchedulerConfig,
    "remote-fetch": RemoteFetchConfig,
    "partition-remover": PartitionRemoverConfig,
}


def all_config_keys() -> set[str]:
    """Every key of every service: environment shared by several services is not a typo."""
    return {key for cls in SERVICE_CONFIGS.values() for key in config_fields(cls)}
