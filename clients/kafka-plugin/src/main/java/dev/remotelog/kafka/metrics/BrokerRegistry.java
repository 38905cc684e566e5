package dev.remotelog.kafka.metrics;

import org.apache.kafka.common.metrics.PluginMetrics;

/**
 * The registry a Kafka 4.1+ broker hands a plugin (Monitorable), kept across its
 * channels: offered once, after configure(), it mirrors the current channel's metrics,
 * and each later channel's (a second configure()) as it is attached.
 */
public final class BrokerRegistry {
    private PluginMetrics offered;
    private Instruments attached;

    public synchronized void offer(PluginMetrics registry) {
        offered = registry;
        if (attached != null) {
            attached.mirrorTo(registry);
        }
    }

    public synchronized void attach(Instruments instruments) {
        attached = instruments;
        if (offered != null) {
            instruments.mirrorTo(offered);
        }
    }
}
