package org.apache.kafka.common.metrics;

import java.util.LinkedHashMap;
import org.apache.kafka.common.MetricName;

/**
 * Kafka 4.1's registry handed to a Monitorable plugin, declared by its binary signature
 * for compiling against the 3.7 API only: the shaded jar leaves this class out (pom.xml),
 * so a broker always uses its own, and only a 4.1+ broker ever passes one.
 */
public interface PluginMetrics {
    MetricName metricName(String name, String description, LinkedHashMap<String, String> tags);

    void addMetric(MetricName metricName, MetricValueProvider<?> metricValueProvider);

    void removeMetric(MetricName metricName);

    Sensor addSensor(String name);

    void removeSensor(String name);
}
