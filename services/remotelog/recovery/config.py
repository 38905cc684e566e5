"""Configuration of `remotelog recover`."""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.core.settings import (
    CustomMetadataSettings,
    KafkaClusterSettings,
    MetadataClientSettings,
    RemoverCallSettings,
    RetrySettings,
)
from remotelog.segmentstore.config import StorageSettings


@dataclass(frozen=True)
class RecoverConfig(
    StorageSettings,
    MetadataClientSettings,
    RetrySettings,
    RemoverCallSettings,
    CustomMetadataSettings,
    KafkaClusterSettings,
):
    """`remotelog recover`: the bucket or directory whose manifests describe the
    segments, the metadata manager that writes them to the metadata topic, and the
    Kafka cluster whose topic ids it recovers (`--bootstrap-server`, under the
    Kafka security settings here)."""
