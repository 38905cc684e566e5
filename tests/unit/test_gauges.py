"""InstanceGauges: each instance reports its own gauges, and nothing once closed."""

from opentelemetry.metrics import Observation
from support.telemetry import metric_points

from remotelog.core.gauges import InstanceGauges
from remotelog.core.metrics import Metric

GAUGE = Metric("remotelog.test.instance.gauge", "gauge", "1", "A test's gauge")


def test_instances_report_their_own_gauges_until_closed(telemetry):
    reader, _ = telemetry

    def values():
        return sorted(p.value for p in metric_points(reader, GAUGE.name, "remotelog.test"))

    lag = {"value": 3.0}
    first = InstanceGauges("remotelog.test", [GAUGE], lambda _: [Observation(lag["value"])])
    second = InstanceGauges("remotelog.test", [GAUGE], lambda _: [Observation(7.0)])
    assert values() == [3.0, 7.0]
    lag["value"] = 4.0
    assert values() == [4.0, 7.0]
    first.close()
    assert values() == [7.0]
    second.close()
    assert values() == []
