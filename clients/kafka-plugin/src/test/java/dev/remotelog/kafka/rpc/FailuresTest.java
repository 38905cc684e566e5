package dev.remotelog.kafka.rpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import dev.remotelog.kafka.config.KafkaApi;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.Map;
import org.apache.kafka.common.errors.ReplicaNotAvailableException;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.junit.jupiter.api.Test;

public class FailuresTest {
    /** An error as a remotelog service sends it: its code and an ErrorInfo reason. */
    public static StatusRuntimeException remotelog(Code code, String reason) {
        return remotelog(code, reason, Map.of());
    }

    /** The same, with the ErrorInfo's metadata (the field an INVALID_ARGUMENT names). */
    public static StatusRuntimeException remotelog(Code code, String reason, Map<String, String> metadata) {
        com.google.rpc.Status status =
                com.google.rpc.Status.newBuilder()
                        .setCode(code.getNumber())
                        .setMessage("what went wrong")
                        .addDetails(
                                Any.pack(
                                        ErrorInfo.newBuilder()
                                                .setDomain("remotelog")
                                                .setReason(reason)
                                                .putAllMetadata(metadata)
                                                .build()))
                        .build();
        return StatusProto.toStatusRuntimeException(status);
    }

    static RemoteStorageException translated(Code code, String reason) {
        return Failures.translate("Call", remotelog(code, reason));
    }

    @Test
    void notFoundIsKafkasRemoteResourceNotFound() {
        RemoteStorageException e = translated(Code.NOT_FOUND, "SEGMENT_NOT_FOUND");
        assertInstanceOf(RemoteResourceNotFoundException.class, e);
        assertEquals("Call failed: NOT_FOUND SEGMENT_NOT_FOUND: what went wrong", e.getMessage());
    }

    /** Kafka's RetriableRemoteStorageException where the API has it (4.2), else a plain
     * RemoteStorageException: nothing older than 4.2 can be told a failure is retriable. */
    static void assertRetriable(RemoteStorageException e) {
        if (KafkaApi.hasRetriable()) {
            assertEquals("RetriableRemoteStorageException", e.getClass().getSimpleName());
            assertTrue(KafkaApi.isRetriable(e));
        } else {
            assertEquals(RemoteStorageException.class, e.getClass());
            assertFalse(KafkaApi.isRetriable(e));
        }
    }

    @Test
    void whatMayPassIsRetriable() {
        assertRetriable(translated(Code.UNAVAILABLE, "REMOTE_STORAGE_UNAVAILABLE"));
        assertRetriable(translated(Code.RESOURCE_EXHAUSTED, "READER_QUEUE_FULL"));
        assertRetriable(translated(Code.NOT_FOUND, "UNKNOWN_TOPIC_OR_PARTITION"));
        assertRetriable(translated(Code.FAILED_PRECONDITION, "UNKNOWN_LEADER_EPOCH"));
        assertRetriable(Failures.translate("Call", Status.DEADLINE_EXCEEDED.asRuntimeException()));
        // A status without remotelog's details (a proxy's, a transport's) still goes by code.
        assertRetriable(
                Failures.translate("Call", Status.UNAVAILABLE.withDescription("io").asRuntimeException()));
    }

    @Test
    void whatWillNotPassIsARemoteStorageException() {
        RemoteStorageException e = translated(Code.INTERNAL, "INTERNAL");
        assertEquals(RemoteStorageException.class, e.getClass());
        assertEquals(RemoteStorageException.class, translated(Code.PERMISSION_DENIED, "PERMISSION_DENIED").getClass());
    }

    @Test
    void notReadyBadInputAndRefusedTransitionsAreWhatKafkasOwnRlmmThrows() {
        assertThrows(ReplicaNotAvailableException.class, () -> translated(Code.UNAVAILABLE, "METADATA_NOT_READY"));
        assertThrows(IllegalArgumentException.class, () -> translated(Code.INVALID_ARGUMENT, "INVALID_ARGUMENT"));
        IllegalStateException refused =
                assertThrows(IllegalStateException.class, () -> translated(Code.FAILED_PRECONDITION, "INVALID_STATE_TRANSITION"));
        assertTrue(refused.getMessage().contains("INVALID_STATE_TRANSITION"));
    }

    @Test
    void anotherDomainsReasonIsNotTaken() {
        com.google.rpc.Status status =
                com.google.rpc.Status.newBuilder()
                        .setCode(Code.NOT_FOUND.getNumber())
                        .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain("elsewhere").setReason("METADATA_NOT_READY").build()))
                        .build();
        StatusRuntimeException failure = StatusProto.toStatusRuntimeException(status);
        assertEquals("", Failures.reason(failure));
        assertInstanceOf(RemoteResourceNotFoundException.class, Failures.translate("Call", failure));
    }
}
