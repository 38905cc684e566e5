package dev.remotelog.kafka.rpc;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import dev.remotelog.kafka.config.KafkaApi;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.kafka.common.errors.ReplicaNotAvailableException;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * A failed call's gRPC status, as the Kafka exception its caller in the broker expects.
 * The rule is error.proto's: the code says what to do, the ErrorInfo reason why.
 */
public final class Failures {
    private Failures() {}

    static final String DOMAIN = "remotelog";
    // error.proto's retry rule: on these codes the same call may succeed later.
    private static final Set<Status.Code> RETRIABLE_CODES =
            Set.of(Status.Code.UNAVAILABLE, Status.Code.RESOURCE_EXHAUSTED, Status.Code.DEADLINE_EXCEEDED);
    // Retriable in Kafka's sense, though final for the call: the broker asks again later.
    private static final Set<String> RETRIABLE_LATER_REASONS =
            Set.of("UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_LEADER_EPOCH");

    /** The ErrorInfo reason of a remotelog service's error, or "" where it has none. */
    public static String reason(Throwable failure) {
        return info(failure).getReason();
    }

    /** The request field a remotelog service's INVALID_ARGUMENT names, or "". */
    public static String field(Throwable failure) {
        return info(failure).getMetadataOrDefault("field", "");
    }

    /** Whether a service's UNSUPPORTED_OPERATION holds for the one segment asked about
     * (a segment stored as chunks has no fetch URL), not for every call of its kind. */
    public static boolean ofOneSegment(Throwable failure) {
        return "segment".equals(info(failure).getMetadataOrDefault("scope", ""));
    }

    /** The remotelog ErrorInfo of a service's error; an empty one where it has none. */
    private static ErrorInfo info(Throwable failure) {
        com.google.rpc.Status status = StatusProto.fromThrowable(failure);
        if (status == null) {
            return ErrorInfo.getDefaultInstance();
        }
        for (Any detail : status.getDetailsList()) {
            if (detail.is(ErrorInfo.class)) {
                try {
                    ErrorInfo info = detail.unpack(ErrorInfo.class);
                    if (DOMAIN.equals(info.getDomain())) {
                        return info;
                    }
                } catch (InvalidProtocolBufferException e) {
                    return ErrorInfo.getDefaultInstance();
                }
            }
        }
        return ErrorInfo.getDefaultInstance();
    }

    /** One blocking call, its failure translated. */
    public static <T> T call(String what, Supplier<T> call) throws RemoteStorageException {
        try {
            return call.get();
        } catch (StatusRuntimeException e) {
            throw translate(what, e);
        }
    }

    public static boolean retriable(StatusRuntimeException failure) {
        return RETRIABLE_CODES.contains(failure.getStatus().getCode())
                || RETRIABLE_LATER_REASONS.contains(reason(failure));
    }

    /** Whether a call that failed so may succeed if made again: a gRPC failure by
     * error.proto's rule; anything else (the channel shut down) never. */
    public static boolean retriable(RuntimeException failure) {
        return failure instanceof StatusRuntimeException && retriable((StatusRuntimeException) failure);
    }

    /**
     * The exception a broker expects of a method declaring RemoteStorageException. Kafka's
     * own RLMM answers "not ready" with ReplicaNotAvailableException, bad input and refused
     * transitions with IllegalArgumentException and IllegalStateException: those are
     * unchecked and thrown as they are; the rest come back to be thrown.
     */
    public static RemoteStorageException translate(String call, StatusRuntimeException failure) {
        RuntimeException unchecked = unchecked(call, failure);
        if (unchecked != null) {
            throw unchecked;
        }
        String message = describe(call, failure);
        if (failure.getStatus().getCode() == Status.Code.NOT_FOUND
                && !"UNKNOWN_TOPIC_OR_PARTITION".equals(reason(failure))) {
            return new RemoteResourceNotFoundException(message, failure);
        }
        if (retriable(failure)) {
            return KafkaApi.retriable(message, failure);
        }
        return new RemoteStorageException(message, failure);
    }

    /** The unchecked exception Kafka's own RLMM would throw for `failure`, or null. */
    public static RuntimeException unchecked(String call, StatusRuntimeException failure) {
        String message = describe(call, failure);
        String reason = reason(failure);
        if ("METADATA_NOT_READY".equals(reason)) {
            return new ReplicaNotAvailableException(message, failure);
        }
        if (RETRIABLE_LATER_REASONS.contains(reason)) {
            return null; // a RetriableRemoteStorageException, whatever the code
        }
        switch (failure.getStatus().getCode()) {
            case INVALID_ARGUMENT:
                return new IllegalArgumentException(message, failure);
            case FAILED_PRECONDITION:
                return new IllegalStateException(message, failure);
            default:
                return null;
        }
    }

    public static String describe(String call, StatusRuntimeException failure) {
        Status status = failure.getStatus();
        String reason = reason(failure);
        return call
                + " failed: "
                + status.getCode()
                + (reason.isEmpty() ? "" : " " + reason)
                + (status.getDescription() == null ? "" : ": " + status.getDescription());
    }
}
