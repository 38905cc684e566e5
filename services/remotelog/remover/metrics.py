"""The partition remover's gauges, from the catalogue in core.metrics (its deletions are
counted by core.remote_delete)."""

from __future__ import annotations

from typing import Protocol

from opentelemetry.metrics import Observation

from remotelog.core.gauges import InstanceGauges
from remotelog.core.metrics import REMOTE_PARTITIONS_PENDING_DELETION

SCOPE = "remotelog.remover"


class Observed(Protocol):
    def pending_count(self) -> int: ...


def register(remover: Observed) -> InstanceGauges:
    """The remover's gauges, reading `remover` until closed."""
    return InstanceGauges(
        SCOPE,
        [REMOTE_PARTITIONS_PENDING_DELETION],
        lambda _: [Observation(remover.pending_count())],
    )
