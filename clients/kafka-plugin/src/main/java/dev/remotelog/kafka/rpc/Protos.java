package dev.remotelog.kafka.rpc;

import com.google.protobuf.ByteString;
import dev.remotelog.kafka.config.KafkaApi;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;
import remotelog.api.segmentstore.v1.SegmentStore;
import remotelog.api.type.v1.Segment;

/**
 * Kafka's types to remotelog's protos and back, field by field. Enums go by id: a proto
 * value is Kafka's id plus one (zero is UNSPECIFIED). UUIDs are 16 bytes, most
 * significant first.
 */
public final class Protos {
    private Protos() {}

    static ByteString uuid(Uuid uuid) {
        ByteBuffer bytes = ByteBuffer.allocate(16);
        bytes.putLong(uuid.getMostSignificantBits()).putLong(uuid.getLeastSignificantBits());
        return ByteString.copyFrom(bytes.array());
    }

    static Uuid uuid(ByteString bytes) {
        if (bytes.size() != 16) {
            throw new IllegalArgumentException("a UUID has 16 bytes, not " + bytes.size());
        }
        ByteBuffer buffer = bytes.asReadOnlyByteBuffer();
        return new Uuid(buffer.getLong(), buffer.getLong());
    }

    public static Segment.TopicIdPartition partition(TopicIdPartition partition) {
        return Segment.TopicIdPartition.newBuilder()
                .setTopicId(uuid(partition.topicId()))
                .setTopic(partition.topic())
                .setPartition(partition.partition())
                .build();
    }

    public static TopicIdPartition partition(Segment.TopicIdPartition partition) {
        return new TopicIdPartition(
                uuid(partition.getTopicId()),
                new TopicPartition(partition.getTopic(), partition.getPartition()));
    }

    static Segment.RemoteLogSegmentId segmentId(RemoteLogSegmentId id) {
        return Segment.RemoteLogSegmentId.newBuilder()
                .setTopicIdPartition(partition(id.topicIdPartition()))
                .setId(uuid(id.id()))
                .build();
    }

    static RemoteLogSegmentId segmentId(Segment.RemoteLogSegmentId id) {
        return new RemoteLogSegmentId(partition(id.getTopicIdPartition()), uuid(id.getId()));
    }

    static Segment.RemoteLogSegmentState state(RemoteLogSegmentState state) {
        return Segment.RemoteLogSegmentState.forNumber(state.id() + 1);
    }

    static RemoteLogSegmentState state(Segment.RemoteLogSegmentState state) {
        int number = state.getNumber();
        if (number < 1) {
            throw new IllegalArgumentException("segment state " + state + " has no Kafka id");
        }
        return RemoteLogSegmentState.forId((byte) (number - 1));
    }

    public static Segment.RemoteLogSegmentMetadata metadata(RemoteLogSegmentMetadata metadata) {
        Segment.RemoteLogSegmentMetadata.Builder proto =
                Segment.RemoteLogSegmentMetadata.newBuilder()
                        .setRemoteLogSegmentId(segmentId(metadata.remoteLogSegmentId()))
                        .setStartOffset(metadata.startOffset())
                        .setEndOffset(metadata.endOffset())
                        .setMaxTimestampMs(metadata.maxTimestampMs())
                        .setBrokerId(metadata.brokerId())
                        .setEventTimestampMs(metadata.eventTimestampMs())
                        .setSegmentSizeInBytes(metadata.segmentSizeInBytes())
                        .setState(state(metadata.state()))
                        .setTxnIndexEmpty(KafkaApi.txnIdxEmpty(metadata));
        for (Map.Entry<Integer, Long> epoch : metadata.segmentLeaderEpochs().entrySet()) {
            proto.addSegmentLeaderEpochs(
                    Segment.SegmentLeaderEpoch.newBuilder()
                            .setLeaderEpoch(epoch.getKey())
                            .setStartOffset(epoch.getValue()));
        }
        metadata.customMetadata()
                .ifPresent(custom -> proto.setCustomMetadata(ByteString.copyFrom(custom.value())));
        return proto.build();
    }

    public static RemoteLogSegmentMetadata metadata(Segment.RemoteLogSegmentMetadata proto) {
        Map<Integer, Long> epochs = new TreeMap<>();
        for (Segment.SegmentLeaderEpoch epoch : proto.getSegmentLeaderEpochsList()) {
            epochs.put(epoch.getLeaderEpoch(), epoch.getStartOffset());
        }
        return KafkaApi.metadata(
                segmentId(proto.getRemoteLogSegmentId()),
                proto.getStartOffset(),
                proto.getEndOffset(),
                proto.getMaxTimestampMs(),
                proto.getBrokerId(),
                proto.getEventTimestampMs(),
                proto.getSegmentSizeInBytes(),
                custom(proto.hasCustomMetadata(), proto.getCustomMetadata()),
                state(proto.getState()),
                epochs,
                proto.getTxnIndexEmpty());
    }

    public static Optional<RemoteLogSegmentMetadata> metadata(
            boolean present, Segment.RemoteLogSegmentMetadata proto) {
        return present ? Optional.of(metadata(proto)) : Optional.empty();
    }

    public static Optional<CustomMetadata> custom(boolean present, ByteString bytes) {
        return present ? Optional.of(new CustomMetadata(bytes.toByteArray())) : Optional.empty();
    }

    public static Segment.RemoteLogSegmentMetadataUpdate update(RemoteLogSegmentMetadataUpdate update) {
        Segment.RemoteLogSegmentMetadataUpdate.Builder proto =
                Segment.RemoteLogSegmentMetadataUpdate.newBuilder()
                        .setRemoteLogSegmentId(segmentId(update.remoteLogSegmentId()))
                        .setEventTimestampMs(update.eventTimestampMs())
                        .setState(state(update.state()))
                        .setBrokerId(update.brokerId());
        update.customMetadata()
                .ifPresent(custom -> proto.setCustomMetadata(ByteString.copyFrom(custom.value())));
        return proto.build();
    }

    public static Segment.RemotePartitionDeleteMetadata delete(RemotePartitionDeleteMetadata delete) {
        return Segment.RemotePartitionDeleteMetadata.newBuilder()
                .setTopicIdPartition(partition(delete.topicIdPartition()))
                .setState(
                        Segment.RemotePartitionDeleteState.forNumber(delete.state().id() + 1))
                .setEventTimestampMs(delete.eventTimestampMs())
                .setBrokerId(delete.brokerId())
                .build();
    }

    public static SegmentStore.IndexType indexType(IndexType type) {
        // Kafka's IndexType and the proto's share names: OFFSET, TIMESTAMP, ...
        return SegmentStore.IndexType.valueOf("INDEX_TYPE_" + type.name());
    }
}
