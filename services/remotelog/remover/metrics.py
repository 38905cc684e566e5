"""The partition remover's metrics, under Kafka's names where Kafka has one."""

from __future__ import annotations

from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from remotelog.core.gauges import InstanceGauges

_meter = metrics.get_meter("remotelog.remover")

DELETE_REQUESTS = _meter.create_counter("RemoteDeleteRequestsPerSec", unit="{request}")
DELETE_ERRORS = _meter.create_counter("RemoteDeleteErrorsPerSec", unit="{error}")


class Observed(Protocol):
    def pending_count(self) -> int: ...


def register(remover: Observed) -> InstanceGauges:
    """The remover's gauges, reading `remover` until closed."""
    return InstanceGauges(
        "remotelog.remover",
        [("RemotePartitionsPendingDeletion", "{partition}")],
        lambda name: [Observation(remover.pending_count())],
    )
