"""core.metrics is the one place metrics are defined: names unique, Prometheus names
an operator can read, each tabled in docs/architecture.md, none made elsewhere."""

import re
from pathlib import Path

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from remotelog.core import metrics as m

ROOT = Path(__file__).parents[2]


def prometheus_names() -> dict[str, str]:
    """OpenTelemetry name -> the family name a real Prometheus exporter gives it."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    meter = provider.get_meter("catalogue")
    for metric in m.ALL_METRICS:
        if metric.kind == "counter":
            meter.create_counter(metric.name, metric.unit, metric.description).add(1)
        elif metric.kind == "histogram":
            meter.create_histogram(metric.name, metric.unit, metric.description).record(1)
        else:
            meter.create_observable_gauge(
                metric.name, [lambda _: [Observation(1)]], metric.unit, metric.description
            )
    by_description = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("# HELP "):
            family, description = line.removeprefix("# HELP ").split(" ", 1)
            by_description[description] = family
    provider.shutdown()
    return {metric.name: by_description[metric.description] for metric in m.ALL_METRICS}


def test_every_metric_has_a_name_and_a_kafka_name_of_its_own():
    names = [metric.name for metric in m.ALL_METRICS]
    kafka = [metric.kafka for metric in m.ALL_METRICS if metric.kafka]
    assert len(names) == len(set(names)) == 43
    assert len(kafka) == len(set(kafka))
    assert all(re.fullmatch(r"remotelog(\.[a-z]+)+", name) for name in names)


def test_prometheus_names_read_as_words_and_say_kafkas_name_in_the_help():
    names = prometheus_names()
    assert names[m.REMOTE_COPY_BYTES.name] == "remotelog_remote_copy_bytes_total"
    assert names[m.STORE_COPY_BYTES.name] == "remotelog_segment_store_copy_bytes_total"
    assert names[m.REMOTE_FETCH_THROTTLE_TIME.name] == (
        "remotelog_remote_fetch_throttle_time_milliseconds"
    )
    assert "persec" not in " ".join(names.values())
    assert m.REMOTE_COPY_BYTES.description.endswith("(Kafka: RemoteCopyBytesPerSec)")


def test_the_architecture_page_tables_every_metric():
    page = (ROOT / "docs/architecture.md").read_text()
    names = prometheus_names()
    rows = [line for line in page.splitlines() if line.startswith("| `remotelog_")]
    assert len(rows) == len(m.ALL_METRICS)
    for metric in m.ALL_METRICS:
        kafka = f"`{metric.kafka}`" if metric.kafka else "—"
        row = f"| `{names[metric.name]}` | {kafka} | {metric.service} | {metric.meaning} |"
        assert row in rows, row


def test_no_module_but_the_catalogue_makes_an_instrument():
    making = re.compile(r"create_(counter|histogram|up_down_counter|observable_\w+)\(")
    allowed = {"core/metrics.py", "core/gauges.py"}
    found = [
        str(path.relative_to(ROOT))
        for tree in ("services/remotelog", "clients/remotelog")
        for path in (ROOT / tree).rglob("*.py")
        if making.search(path.read_text())
        and not any(str(path).endswith(allowed_path) for allowed_path in allowed)
    ]
    assert found == []
