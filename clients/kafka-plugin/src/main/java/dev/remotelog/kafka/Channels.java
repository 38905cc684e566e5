package dev.remotelog.kafka;

import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptor;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.MetadataUtils;
import java.io.File;
import java.io.IOException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.config.ConfigException;

/** A channel to one service: plain or TLS (mutual with a client certificate), with the
 * broker role's bearer token on every call where one is configured. */
final class Channels {
    private Channels() {}

    static final int MAX_MESSAGE_BYTES = 16 << 20;

    static ManagedChannel open(Settings settings, String prefix) {
        ChannelCredentials credentials;
        if (settings.tls()) {
            try {
                TlsChannelCredentials.Builder tls =
                        TlsChannelCredentials.newBuilder().trustManager(new File(settings.caFile()));
                if (!settings.certFile().isEmpty()) {
                    tls.keyManager(new File(settings.certFile()), new File(settings.keyFile()));
                }
                credentials = tls.build();
            } catch (IOException | IllegalArgumentException e) {
                throw new ConfigException(
                        prefix + Settings.TLS_CA, settings.caFile(), "unreadable TLS files: " + e);
            }
        } else {
            credentials = InsecureChannelCredentials.create();
        }
        var builder =
                Grpc.newChannelBuilder(settings.address(), credentials)
                        .maxInboundMessageSize(MAX_MESSAGE_BYTES)
                        .userAgent("remotelog-kafka-plugin");
        if (!settings.token().isEmpty()) {
            builder.intercept(bearer(settings.token()));
        }
        return builder.build();
    }

    static ClientInterceptor bearer(String token) {
        Metadata headers = new Metadata();
        headers.put(
                Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER),
                "Bearer " + token);
        return MetadataUtils.newAttachHeadersInterceptor(headers);
    }

    static void close(ManagedChannel channel) {
        if (channel == null) {
            return;
        }
        channel.shutdown();
        try {
            if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
                channel.shutdownNow();
            }
        } catch (InterruptedException e) {
            channel.shutdownNow();
            Thread.currentThread().interrupt();
        }
    }
}
