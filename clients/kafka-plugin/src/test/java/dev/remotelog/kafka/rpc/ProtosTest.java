package dev.remotelog.kafka.rpc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.remotelog.kafka.config.KafkaApi;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteState;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;
import org.junit.jupiter.api.Test;
import remotelog.api.segmentstore.v1.SegmentStore;
import remotelog.api.type.v1.Segment;

public class ProtosTest {
    public static final TopicIdPartition PARTITION =
            new TopicIdPartition(
                    new Uuid(0x0102030405060708L, 0x090a0b0c0d0e0f10L),
                    new TopicPartition("orders", 7));

    public static RemoteLogSegmentMetadata segment(RemoteLogSegmentState state, Optional<CustomMetadata> custom) {
        return segment(state, custom, false);
    }

    public static RemoteLogSegmentMetadata segment(
            RemoteLogSegmentState state, Optional<CustomMetadata> custom, boolean txnIdxEmpty) {
        return segment(state, custom, txnIdxEmpty, 4096);
    }

    /** A copied segment whose log is `size` bytes. */
    public static RemoteLogSegmentMetadata segmentOfSize(int size) {
        return segment(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, Optional.empty(), false, size);
    }

    public static RemoteLogSegmentMetadata segment(
            RemoteLogSegmentState state, Optional<CustomMetadata> custom, boolean txnIdxEmpty, int size) {
        return KafkaApi.metadata(
                new RemoteLogSegmentId(PARTITION, Uuid.randomUuid()),
                100L,
                199L,
                1_700_000_000_123L,
                3,
                1_700_000_000_999L,
                size,
                custom,
                state,
                Map.of(0, 100L, 2, 150L),
                txnIdxEmpty);
    }

    @Test
    void uuidsAreSixteenBytesMostSignificantFirst() {
        byte[] expected = new byte[16];
        for (int i = 0; i < 16; i++) {
            expected[i] = (byte) (i + 1);
        }
        assertArrayEquals(expected, Protos.uuid(PARTITION.topicId()).toByteArray());
        assertEquals(PARTITION.topicId(), Protos.uuid(Protos.uuid(PARTITION.topicId())));
    }

    @Test
    void segmentMetadataRoundTripsInEveryState() {
        for (RemoteLogSegmentState state : RemoteLogSegmentState.values()) {
            for (Optional<CustomMetadata> custom :
                    java.util.List.of(Optional.<CustomMetadata>empty(), Optional.of(new CustomMetadata(new byte[] {1, 2, 3})))) {
                for (boolean txnIdxEmpty : new boolean[] {false, true}) {
                    RemoteLogSegmentMetadata metadata = segment(state, custom, txnIdxEmpty);
                    Segment.RemoteLogSegmentMetadata proto = Protos.metadata(metadata);
                    assertEquals(state.id() + 1, proto.getState().getNumber(), state.name());
                    assertEquals(metadata, Protos.metadata(proto));
                    // The flag travels where the broker has it (4.0+), and is false before.
                    boolean carried = txnIdxEmpty && KafkaApi.hasTxnIndexFlag();
                    assertEquals(carried, proto.getTxnIndexEmpty());
                    assertEquals(carried, KafkaApi.txnIdxEmpty(Protos.metadata(proto)));
                }
            }
        }
    }

    @Test
    void updatesAndPartitionDeletionsCarryKafkasIdsPlusOne() {
        var update =
                new RemoteLogSegmentMetadataUpdate(
                        new RemoteLogSegmentId(PARTITION, Uuid.randomUuid()),
                        1L,
                        Optional.empty(),
                        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                        4);
        Segment.RemoteLogSegmentMetadataUpdate proto = Protos.update(update);
        assertEquals(Segment.RemoteLogSegmentState.REMOTE_LOG_SEGMENT_STATE_COPY_SEGMENT_FINISHED, proto.getState());
        assertEquals(4, proto.getBrokerId());
        assertEquals(update.remoteLogSegmentId(), Protos.segmentId(proto.getRemoteLogSegmentId()));
        for (RemotePartitionDeleteState state : RemotePartitionDeleteState.values()) {
            var delete = new RemotePartitionDeleteMetadata(PARTITION, state, 5L, 6);
            assertEquals(state.id() + 1, Protos.delete(delete).getState().getNumber());
            assertEquals(PARTITION, Protos.partition(Protos.delete(delete).getTopicIdPartition()));
        }
    }

    @Test
    void everyIndexTypeHasItsProtoName() {
        for (IndexType type : IndexType.values()) {
            assertEquals("INDEX_TYPE_" + type.name(), Protos.indexType(type).name());
        }
        assertEquals(SegmentStore.IndexType.INDEX_TYPE_TRANSACTION, Protos.indexType(IndexType.TRANSACTION));
    }

    @Test
    void anUnspecifiedStateOrAShortUuidIsRefused() {
        assertThrows(
                IllegalArgumentException.class,
                () -> Protos.state(Segment.RemoteLogSegmentState.REMOTE_LOG_SEGMENT_STATE_UNSPECIFIED));
        assertThrows(
                IllegalArgumentException.class,
                () -> Protos.uuid(com.google.protobuf.ByteString.copyFrom(new byte[15])));
    }
}
