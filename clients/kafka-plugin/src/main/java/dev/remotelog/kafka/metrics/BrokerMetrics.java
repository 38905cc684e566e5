package dev.remotelog.kafka.metrics;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.metrics.PluginMetrics;

/**
 * Mirrors a plugin's metrics into the registry a Kafka 4.1+ broker hands it (Monitorable),
 * so they also reach the broker's own `metric.reporters` and its JMX domain, where Kafka
 * tags them with the plugin's `config` and `class`. Each mirror reads the plugin's metric;
 * nothing is recorded twice. As a reporter of the plugin's Metrics it sees every metric
 * added later (a method's first call) and the removal of all of them at close.
 */
public final class BrokerMetrics implements MetricsReporter {
    private static final String COUNT_GROUP = "kafka-metrics-count"; // Metrics' own, per registry

    private final PluginMetrics broker;
    private final Map<MetricName, MetricName> mirrors = new ConcurrentHashMap<>();

    BrokerMetrics(PluginMetrics broker) {
        this.broker = broker;
    }

    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public void init(List<KafkaMetric> metrics) {
        metrics.forEach(this::metricChange);
    }

    @Override
    public void metricChange(KafkaMetric metric) {
        MetricName ours = metric.metricName();
        if (ours.group().equals(COUNT_GROUP) || mirrors.containsKey(ours)) {
            return;
        }
        MetricName theirs = broker.metricName(ours.name(), ours.description(), new LinkedHashMap<>(ours.tags()));
        broker.addMetric(theirs, (Gauge<Object>) (config, now) -> metric.metricValue());
        mirrors.put(ours, theirs);
    }

    @Override
    public void metricRemoval(KafkaMetric metric) {
        MetricName theirs = mirrors.remove(metric.metricName());
        if (theirs != null) {
            broker.removeMetric(theirs);
        }
    }

    @Override
    public void close() {
        mirrors.values().forEach(broker::removeMetric);
        mirrors.clear();
    }
}
