"""The scheduler's instruments (RemoteLogManager's copy and expiration tasks), from the
catalogue in core.metrics."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from opentelemetry.metrics import Observation

from remotelog.core import metrics as m
from remotelog.core.gauges import InstanceGauges

SCOPE = "remotelog.scheduler"


class Observed(Protocol):
    def partition_gauges(self) -> Iterable[tuple[dict[str, str | int], dict[str, float]]]:
        """(attributes, {Kafka's metric name: value}) per partition."""

    def idle_percent(self) -> float: ...


_PARTITION_GAUGES = (
    m.REMOTE_COPY_LAG_BYTES,
    m.REMOTE_COPY_LAG_SEGMENTS,
    m.REMOTE_DELETE_LAG_BYTES,
    m.REMOTE_DELETE_LAG_SEGMENTS,
    m.REMOTE_LOG_SIZE_BYTES,
    m.REMOTE_LOG_SIZE_COMPUTATION_TIME,
    m.REMOTE_LOG_METADATA_COUNT,
)


def register(scheduler: Observed) -> InstanceGauges:
    """The scheduler's gauges, reading `scheduler` until closed."""

    def observe(gauge: m.Metric) -> Iterable[Observation]:
        if gauge is m.REMOTE_LOG_MANAGER_TASKS_IDLE:
            return [Observation(scheduler.idle_percent())]
        return [
            Observation(values[gauge.kafka], attributes)
            for attributes, values in scheduler.partition_gauges()
            if gauge.kafka in values
        ]

    return InstanceGauges(SCOPE, [*_PARTITION_GAUGES, m.REMOTE_LOG_MANAGER_TASKS_IDLE], observe)
