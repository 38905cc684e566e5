package org.apache.kafka.common.metrics;

/**
 * Kafka 4.1's interface of a plugin that registers metrics in the broker's own registry
 * (KIP-877), declared here by its binary signature so that the plugin classes, which
 * implement it, also load on Kafka 3.7-4.0, which lack it. The jar carries this class: a
 * broker that has the interface resolves its own first (Kafka's class path), or finds this
 * one, which names the same single method; an older broker finds only this one and never
 * calls it.
 */
public interface Monitorable {
    void withPluginMetrics(PluginMetrics metrics);
}
