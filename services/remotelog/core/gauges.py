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

from remotelog.core.metrics import Metric

Observe = Callable[[Metric], Iterable[Observation]]


class InstanceGauges:
    def __init__(self, scope: str, gauges: Iterable[Metric], observe: Observe):
        """`observe(metric)` yields the observations of that gauge (core.metrics)."""
        self._observe: Observe | None = observe
        meter = metrics.get_meter(scope, attributes={"remotelog.instance": uuid.uuid4().hex[:12]})
        for gauge in gauges:
            if gauge.kind != "gauge":
                raise TypeError(f"{gauge.name} is a {gauge.kind}, not a gauge")
            meter.create_observable_gauge(
                gauge.name,
                callbacks=[self._callback(gauge)],
                unit=gauge.unit,
                description=gauge.description,
            )

    def _callback(self, gauge: Metric) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            read = self._observe
            return [] if read is None else list(read(gauge))

        return observe

    def close(self) -> None:
        self._observe = None
