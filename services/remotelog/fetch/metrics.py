"""The remote read path's instruments (RemoteLogManager's reader pool, the purgatory,
the index cache), from the catalogue in core.metrics."""

from __future__ import annotations

from typing import Protocol

from opentelemetry.metrics import Observation

from remotelog.core import metrics as m
from remotelog.core.gauges import InstanceGauges

SCOPE = "remotelog.fetch"


class Observed(Protocol):
    def gauges(self) -> dict[m.Metric, float]: ...


def register(fetch: Observed) -> InstanceGauges:
    """The fetch service's gauges, reading `fetch` until closed."""
    return InstanceGauges(
        SCOPE,
        (
            m.REMOTE_LOG_READER_TASK_QUEUE_SIZE,
            m.REMOTE_LOG_READER_IDLE,
            m.REMOTE_FETCH_PURGATORY_DELAYED,
            m.REMOTE_INDEX_CACHE_SIZE,
        ),
        lambda gauge: [Observation(fetch.gauges()[gauge])],
    )
