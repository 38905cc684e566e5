"""Gauges of the remote read path, under Kafka's names (RemoteLogManager's reader pool)."""

from __future__ import annotations

from typing import Protocol

from opentelemetry.metrics import Observation

from remotelog.core.gauges import InstanceGauges


class Observed(Protocol):
    def gauges(self) -> dict[str, float]: ...


def register(fetch: Observed) -> InstanceGauges:
    """The fetch service's gauges, reading `fetch` until closed."""
    return InstanceGauges(
        "remotelog.fetch",
        (
            ("RemoteLogReaderTaskQueueSize", "{task}"),
            ("RemoteLogReaderAvgIdlePercent", "%"),
            ("RemoteFetchPurgatoryDelayedOperations", "{fetch}"),
            ("RemoteIndexCacheSizeBytes", "By"),
        ),
        lambda name: [Observation(fetch.gauges()[name])],
    )
