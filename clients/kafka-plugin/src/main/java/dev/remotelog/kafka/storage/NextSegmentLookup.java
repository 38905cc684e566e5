package dev.remotelog.kafka.storage;

import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.metrics.Instruments;
import dev.remotelog.kafka.rpc.Channels;
import dev.remotelog.kafka.rpc.Protos;
import io.grpc.Channel;
import io.grpc.ClientInterceptors;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataResponse;
import remotelog.api.metadata.v1.RemoteLogMetadataServiceGrpc;

/**
 * Where the storage manager learns which segment follows one being read: the metadata
 * manager, asked over a channel of the storage manager's own. Kafka configures its two
 * plugins apart and loads each by a class loader of its own, so neither can hand the
 * other anything; asking the service publishes nothing in the broker's JVM, and works
 * whichever RemoteLogMetadataManager the broker runs, Kafka's own included, as long as
 * a remotelog metadata manager serves the topic.
 */
public final class NextSegmentLookup implements NextSegments.Finder {
    private final ManagedChannel owned;
    private final RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub lookups;
    private final long timeoutMs;

    /** Over `channel`; `owned`, if not null, is closed with this. */
    public NextSegmentLookup(Channel channel, ManagedChannel owned, long timeoutMs) {
        this.owned = owned;
        this.lookups = RemoteLogMetadataServiceGrpc.newBlockingStub(channel);
        this.timeoutMs = timeoutMs;
    }

    /** A channel to the metadata manager `settings` name, if they name one, its calls
     * counted by `instruments`. */
    public static Optional<NextSegmentLookup> open(Settings settings, Instruments instruments) {
        return settings.nextSegmentAddress()
                .map(
                        address -> {
                            ManagedChannel channel = Channels.open(settings, address);
                            Channel counted = ClientInterceptors.intercept(channel, instruments.interceptor());
                            return new NextSegmentLookup(counted, channel, settings.timeoutMs());
                        });
    }

    /**
     * The lookup Kafka makes when its reader reaches `segment`'s end offset + 1, made
     * early. The next segment most often starts in the epoch this one ends in; where a
     * new epoch starts there, this finds nothing, and Kafka's own lookup does the work.
     */
    @Override
    public Optional<RemoteLogSegmentMetadata> after(RemoteLogSegmentMetadata segment) {
        GetRemoteLogSegmentMetadataRequest request =
                GetRemoteLogSegmentMetadataRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(segment.topicIdPartition()))
                        .setLeaderEpoch(segment.segmentLeaderEpochs().lastKey())
                        .setOffset(segment.endOffset() + 1)
                        .build();
        GetRemoteLogSegmentMetadataResponse found;
        try {
            found =
                    lookups.withDeadlineAfter(timeoutMs, TimeUnit.MILLISECONDS)
                            .getRemoteLogSegmentMetadata(request);
        } catch (StatusRuntimeException e) {
            return Optional.empty(); // Kafka's own lookup asks again, and reports a failure
        }
        return Protos.metadata(found.hasRemoteLogSegmentMetadata(), found.getRemoteLogSegmentMetadata());
    }

    public void close() {
        if (owned != null) {
            Channels.close(owned);
        }
    }
}
