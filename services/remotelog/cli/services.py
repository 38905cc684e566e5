"""The services the CLI knows, by their command-line names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from remotelog.core.config import config_fields
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.fetch.server import start_remote_fetch
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.server import start_metadata_manager
from remotelog.recovery.config import RecoverConfig
from remotelog.remover.config import PartitionRemoverConfig, ScrubConfig
from remotelog.remover.server import start_partition_remover
from remotelog.rpc.serve import Stoppable
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.server import start_copy_scheduler
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.server import start_segment_store

SERVICE_CONFIGS: dict[str, type[Any]] = {
    "segment-store": SegmentStoreConfig,
    "metadata-manager": MetadataManagerConfig,
    "copy-scheduler": CopySchedulerConfig,
    "remote-fetch": RemoteFetchConfig,
    "partition-remover": PartitionRemoverConfig,
}

# How `remotelog serve <name>` starts each service from its config.
SERVICE_STARTERS: dict[str, Callable[[Any], Awaitable[Stoppable]]] = {
    "segment-store": start_segment_store,
    "metadata-manager": start_metadata_manager,
    "copy-scheduler": start_copy_scheduler,
    "remote-fetch": start_remote_fetch,
    "partition-remover": start_partition_remover,
}


# What `config check --service` knows: the services and the commands with a config.
COMMAND_CONFIGS: dict[str, type[Any]] = {
    **SERVICE_CONFIGS,
    "scrub": ScrubConfig,
    "recover": RecoverConfig,
}


def all_config_keys() -> set[str]:
    """Every key of every service: environment shared by several services is not a typo."""
    return {key for cls in COMMAND_CONFIGS.values() for key in config_fields(cls)}
