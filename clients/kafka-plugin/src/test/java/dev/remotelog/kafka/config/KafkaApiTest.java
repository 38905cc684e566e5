package dev.remotelog.kafka.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.rpc.ProtosTest;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.junit.jupiter.api.Test;
import remotelog.api.type.v1.Segment;

/** Run once against the oldest Kafka API the plugin supports and once against the newest
 * (the pom's two surefire runs, each naming its API in kafka.api.version). */
public class KafkaApiTest {
    static final String API = System.getProperty("kafka.api.version");

    @Test
    void theNewerPartsAreFoundWhereTheBrokersApiHasThem() {
        assertEquals(API, KafkaApi.brokerVersion());
        int[] api = KafkaApi.majorMinor(API);
        assertEquals(api[0] >= 4, KafkaApi.hasTxnIndexFlag(), API);
        assertEquals(api[0] > 4 || (api[0] == 4 && api[1] >= 2), KafkaApi.hasRetriable(), API);
    }

    @Test
    void theTransactionIndexFlagTravelsWhereTheApiHasIt() {
        RemoteLogSegmentMetadata segment =
                KafkaApi.metadata(
                        new RemoteLogSegmentId(ProtosTest.PARTITION, Uuid.randomUuid()),
                        0L,
                        9L,
                        1L,
                        1,
                        2L,
                        100,
                        Optional.empty(),
                        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                        Map.of(0, 0L),
                        true);
        Segment.RemoteLogSegmentMetadata proto = Protos.metadata(segment);
        // Before 4.0 a segment may always have a transaction index: Kafka looks in each.
        assertEquals(KafkaApi.hasTxnIndexFlag(), proto.getTxnIndexEmpty());
        assertEquals(KafkaApi.hasTxnIndexFlag(), KafkaApi.txnIdxEmpty(Protos.metadata(proto)));
        assertEquals(segment, Protos.metadata(proto));
    }

    @Test
    void aBrokerOlderThanTheRangeFailsConfigureNamingItsVersion() {
        ConfigException refused =
                assertThrows(ConfigException.class, () -> KafkaApi.checkSupported("3.6.2"));
        assertEquals(
                "The remotelog plugin runs on Apache Kafka 3.7 to 4.4, and this broker is Kafka"
                        + " 3.6.2: run remotelog's copy scheduler beside it instead",
                refused.getMessage());
    }

    @Test
    void aBrokerNewerThanTheRangeIsWarnedOfAndGoesOn() {
        for (String supported : new String[] {"3.7.0", "3.9.1", "4.0.0-SNAPSHOT", "4.4.0"}) {
            assertNull(KafkaApi.beyondRange(supported), supported);
            KafkaApi.checkSupported(supported);
        }
        String warning = KafkaApi.beyondRange("4.5.0");
        assertTrue(warning.contains("Kafka 4.5.0") && warning.contains("3.7 to 4.4"), warning);
        assertTrue(KafkaApi.beyondRange("unknown").contains("(unknown)"));
        KafkaApi.checkSupported("4.5.0"); // goes on
        KafkaApi.checkSupported("unknown");
    }
}
