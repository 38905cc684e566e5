"""The partition remover's metrics, under Kafka's names where Kafka has one."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

_meter = metrics.get_meter("remotelog.remover")

DELETE_REQUESTS = _meter.create_counter("RemoteDeleteRequestsPerSec", unit="{request}")
DELETE_ERRORS = _meter.create_counter("RemoteDeleteErrorsPerSec", unit="{error}")


class Observed(Protocol):
    def pending_count(self) -> int: ...


_REMOVERS: weakref.WeakSet[Observed] = weakref.WeakSet()


def register(remover: Observed) -> None:
    _REMOVERS.add(remover)


def _observe_pending(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(r.pending_count()) for r in list(_REMOVERS)]


_meter.create_observable_gauge(
    "RemotePartitionsPendingDeletion", callbacks=[_observe_pending], unit="{partition}"
)
