package dev.remotelog.kafka.rpc;

import dev.remotelog.kafka.config.KafkaApi;
import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.metrics.Instruments;
import io.grpc.Channel;
import io.grpc.ClientInterceptors;
import io.grpc.ManagedChannel;
import java.util.Map;

/** A plugin's settings, its channel to the service they name, and its metrics, which
 * count every call made through the channel. */
public final class ServiceChannel {
    private final Settings settings;
    private final ManagedChannel managed;
    private final Instruments instruments;
    private final Channel channel;

    public ServiceChannel(Settings settings, ManagedChannel managed) {
        this.settings = settings;
        this.managed = managed;
        this.instruments = new Instruments(settings.role());
        this.channel = ClientInterceptors.intercept(managed, instruments.interceptor());
    }

    /** The `role` plugin's settings, on a broker the plugin supports (KafkaApi). */
    public static ServiceChannel configure(Map<String, ?> configs, Settings.Role role) {
        KafkaApi.checkSupported(KafkaApi.brokerVersion());
        Settings settings = Settings.parse(configs, role);
        return new ServiceChannel(settings, Channels.open(settings));
    }

    public Settings settings() {
        return settings;
    }

    public Channel channel() {
        return channel;
    }

    public Instruments instruments() {
        return instruments;
    }

    public void close() {
        Channels.close(managed);
        instruments.close();
    }
}
