package dev.remotelog.kafka;

import io.grpc.ManagedChannel;
import java.util.Map;

/** A plugin's settings and its channel to the service they name. */
record ServiceChannel(Settings settings, ManagedChannel channel) {
    static ServiceChannel configure(Map<String, ?> configs, String prefix, String addressKey) {
        Settings settings = Settings.parse(configs, prefix, addressKey);
        return new ServiceChannel(settings, Channels.open(settings, prefix));
    }

    void close() {
        Channels.close(channel);
    }
}
