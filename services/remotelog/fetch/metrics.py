"""Gauges of the remote read path, under Kafka's names (RemoteLogManager's reader pool)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

_meter = metrics.get_meter("remotelog.fetch")


class Observed(Protocol):
    def gauges(self) -> dict[str, float]: ...


_FETCHES: weakref.WeakSet[Observed] = weakref.WeakSet()


def register(fetch: Observed) -> None:
    _FETCHES.add(fetch)


def _gauge(name: str) -> object:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(fetch.gauges()[name]) for fetch in list(_FETCHES)]

    return observe


for _name, _unit in (
    ("RemoteLogReaderTaskQueueSize", "{task}"),
    ("RemoteLogReaderAvgIdlePercent", "%"),
    ("RemoteFetchPurgatoryDelayedOperations", "{fetch}"),
    ("RemoteIndexCacheSizeBytes", "By"),
):
    _meter.create_observable_gauge(_name, callbacks=[_gauge(_name)], unit=_unit)  # type: ignore[list-item]
