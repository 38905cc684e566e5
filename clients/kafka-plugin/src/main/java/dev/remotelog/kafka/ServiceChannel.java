package dev.remotelog.kafka;

import io.grpc.ManagedChannel;
import java.util.Map;

/** A plugin's settings and its channel to the service they name. */
final class ServiceChannel {
    private final Settings settings;
    private final ManagedChannel channel;

    ServiceChannel(Settings settings, ManagedChannel channel) {
        this.settings = settings;
        this.channel = channel;
    }

    /** The `role` plugin's settings, on a broker the plugin supports (KafkaApi). */
    static ServiceChannel configure(Map<String, ?> configs, Settings.Role role) {
        KafkaApi.checkSupported(KafkaApi.brokerVersion());
        Settings settings = Settings.parse(configs, role);
        return new ServiceChannel(settings, Channels.open(settings));
    }

    Settings settings() {
        return settings;
    }

    ManagedChannel channel() {
        return channel;
    }

    void close() {
        Channels.close(channel);
    }
}
