package dev.remotelog.kafka.rpc;

import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.config.TlsFiles;
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

/** A channel to one service: plain or TLS (mutual with a client certificate), with the
 * broker role's bearer token on every call where one is configured. */
public final class Channels {
    private Channels() {}

    static final int MAX_MESSAGE_BYTES = 16 << 20;

    public static ManagedChannel open(Settings settings) {
        return open(settings, settings.address());
    }

    /** To `address`, with the TLS and token `settings` name. */
    public static ManagedChannel open(Settings settings, String address) {
        try {
            var builder =
                    Grpc.newChannelBuilder(address, credentials(settings))
                            .maxInboundMessageSize(MAX_MESSAGE_BYTES)
                            .userAgent("remotelog-kafka-plugin");
            if (!settings.token().isEmpty()) {
                builder.intercept(bearer(settings.token()));
            }
            return builder.build();
        } catch (IOException | RuntimeException e) {
            // gRPC reads the PEM files only when it builds the channel's TLS context, and
            // its error names none of them: find the one that is wrong.
            throw TlsFiles.blame(settings, e);
        }
    }

    private static ChannelCredentials credentials(Settings settings) throws IOException {
        if (!settings.tls()) {
            return InsecureChannelCredentials.create();
        }
        TlsChannelCredentials.Builder tls =
                TlsChannelCredentials.newBuilder().trustManager(new File(settings.caFile()));
        if (!settings.certFile().isEmpty()) {
            tls.keyManager(new File(settings.certFile()), new File(settings.keyFile()));
        }
        return tls.build();
    }

    static ClientInterceptor bearer(String token) {
        Metadata headers = new Metadata();
        headers.put(
                Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER),
                "Bearer " + token);
        return MetadataUtils.newAttachHeadersInterceptor(headers);
    }

    public static void close(ManagedChannel channel) {
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
