"""Observable gauges that read one live object, registered by that object.

The OpenTelemetry SDK keeps the callbacks of an instrument's first
registration on a meter and ignores a second one of the same name, so each
instance takes a meter of its own (told apart by the scope attribute
`remotelog.instance`). Closing drops the reference to the instance: its
gauges report nothing from then on and the instance can be freed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

Observe = Callable[[str], Iterable[Observation]]


class InstanceGauges:
    def __init__(self, scope: str, instruments: Iterable[tuple[str, str]], observe: Observe):
        """`instruments` are (name, unit); `observe(name)` yields that gauge's observations."""
        self._observe: Observe | None = observe
        meter = metrics.get_meter(scope, attributes={"remotelog.instance": uuid.uuid4().hex[:12]})
        for name, unit in instruments:
            meter.create_observable_gauge(name, callbacks=[self._callback(name)], unit=unit)

    def _callback(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            read = self._observe
            return [] if read is None else list(read(name))

        return observe

    def close(self) -> None:
        self._observe = None
