"""Reading what the in-memory OpenTelemetry reader (the `telemetry` fixture) collected."""


def metric_points(reader, name, scope=None):
    """Every data point of the instrument `name` (the SDK lower-cases instrument names),
    optionally only from the meter named `scope` (services in one process share names)."""
    data = reader.get_metrics_data()
    points = []
    for resource in data.resource_metrics if data else []:
        for scope_metrics in resource.scope_metrics:
            if scope is not None and scope_metrics.scope.name != scope:
                continue
            for metric in scope_metrics.metrics:
                if metric.name == name.lower():
                    points.extend(metric.data.data_points)
    return points


def counter(reader, name, topic, scope=None):
    """The sum of a metric's points for one topic."""
    points = metric_points(reader, name, scope)
    return sum(p.value for p in points if p.attributes.get("topic") == topic)
