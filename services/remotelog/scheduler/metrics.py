"""The scheduler's metrics, under Kafka's names (BrokerTopicMetrics / RemoteLogManager)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from remotelog.core.gauges import InstanceGauges

_meter = metrics.get_meter("remotelog.scheduler")

COPY_BYTES = _meter.create_counter("RemoteCopyBytesPerSec", unit="By")
COPY_REQUESTS = _meter.create_counter("RemoteCopyRequestsPerSec", unit="{request}")
COPY_ERRORS = _meter.create_counter("RemoteCopyErrorsPerSec", unit="{error}")
DELETE_REQUESTS = _meter.create_counter("RemoteDeleteRequestsPerSec", unit="{request}")
DELETE_ERRORS = _meter.create_counter("RemoteDeleteErrorsPerSec", unit="{error}")
# KIP-956: how long copies waited for the copy quota.
COPY_THROTTLE_TIME = _meter.create_histogram("RemoteCopyThrottleTime", unit="ms")
# Rolled segments the broker's own retention deleted before they were tiered.
SEGMENTS_DELETED_BEFORE_TIERING = _meter.create_counter(
    "SegmentsDeletedBeforeTiering", unit="{segment}"
)


class Observed(Protocol):
    def partition_gauges(self) -> Iterable[tuple[dict[str, str | int], dict[str, float]]]:
        """(attributes, {metric name: value}) per partition."""

    def idle_percent(self) -> float: ...


_PARTITION_GAUGES = (
    ("RemoteCopyLagBytes", "By"),
    ("RemoteCopyLagSegments", "{segment}"),
    ("RemoteDeleteLagBytes", "By"),
    ("RemoteDeleteLagSegments", "{segment}"),
    ("RemoteLogSizeBytes", "By"),
    ("RemoteLogSizeComputationTime", "ms"),
    ("RemoteLogMetadataCount", "{segment}"),
)
_IDLE = "RemoteLogManagerTasksAvgIdlePercent"


def register(scheduler: Observed) -> InstanceGauges:
    """The scheduler's gauges, reading `scheduler` until closed."""

    def observe(name: str) -> Iterable[Observation]:
        if name == _IDLE:
            return [Observation(scheduler.idle_percent())]
        return [
            Observation(values[name], attributes)
            for attributes, values in scheduler.partition_gauges()
            if name in values
        ]

    return InstanceGauges("remotelog.scheduler", [*_PARTITION_GAUGES, (_IDLE, "%")], observe)
