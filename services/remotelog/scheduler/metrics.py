"""The scheduler's metrics, under Kafka's names (BrokerTopicMetrics / RemoteLogManager)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

_meter = metrics.get_meter("remotelog.scheduler")

COPY_BYTES = _meter.create_counter("RemoteCopyBytesPerSec", unit="By")
COPY_REQUESTS = _meter.create_counter("RemoteCopyRequestsPerSec", unit="{request}")
COPY_ERRORS = _meter.create_counter("RemoteCopyErrorsPerSec", unit="{error}")
DELETE_REQUESTS = _meter.create_counter("RemoteDeleteRequestsPerSec", unit="{request}")
DELETE_ERRORS = _meter.create_counter("RemoteDeleteErrorsPerSec", unit="{error}")


class Observed(Protocol):
    def partition_gauges(self) -> Iterable[tuple[dict[str, str | int], dict[str, float]]]:
        """(attributes, {metric name: value}) per partition."""

    def idle_percent(self) -> float: ...


_SCHEDULERS: weakref.WeakSet[Observed] = weakref.WeakSet()


def register(scheduler: Observed) -> None:
    _SCHEDULERS.add(scheduler)


def _partition_gauge(name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(values[name], attributes)
            for scheduler in list(_SCHEDULERS)
            for attributes, values in scheduler.partition_gauges()
            if name in values
        ]

    return observe


for _name, _unit in (
    ("RemoteCopyLagBytes", "By"),
    ("RemoteCopyLagSegments", "{segment}"),
    ("RemoteDeleteLagBytes", "By"),
    ("RemoteDeleteLagSegments", "{segment}"),
    ("RemoteLogSizeBytes", "By"),
):
    _meter.create_observable_gauge(_name, callbacks=[_partition_gauge(_name)], unit=_unit)


def _observe_idle(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(s.idle_percent()) for s in list(_SCHEDULERS)]


_meter.create_observable_gauge(
    "RemoteLogManagerTasksAvgIdlePercent", callbacks=[_observe_idle], unit="%"
)
