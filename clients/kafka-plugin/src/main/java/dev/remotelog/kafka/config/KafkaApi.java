package dev.remotelog.kafka.config;

import java.io.IOException;
import java.io.InputStream;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The parts of Kafka's storage API newer than 3.7, which the plugin is compiled against,
 * looked up once in the broker's own classes when the plugin loads: one jar serves every
 * Kafka from 3.7 to 4.4 and uses what the running broker has.
 *
 * <ul>
 *   <li>RetriableRemoteStorageException (4.2), else RemoteStorageException;
 *   <li>RemoteLogSegmentMetadata's transaction-index-empty flag (4.0, KIP-1058), else a
 *       segment is taken to maybe have a transaction index.
 * </ul>
 *
 * isReady and nextSegmentWithTxnIndex (4.0) need nothing here: on an older broker they are
 * methods its interface does not name, and nothing calls them.
 */
public final class KafkaApi {
    private KafkaApi() {}

    static final String OLDEST = "3.7";
    static final String NEWEST = "4.4";
    private static final Logger LOG = LoggerFactory.getLogger(KafkaApi.class);
    private static final String PACKAGE = "org.apache.kafka.server.log.remote.storage.";
    private static final MethodHandles.Lookup LOOKUP = MethodHandles.publicLookup();
    private static final MethodHandle NEW_RETRIABLE = retriableConstructor();
    private static final MethodHandle IS_TXN_IDX_EMPTY = txnIdxEmptyGetter();
    // The 4.0 constructor taking the flag; before 4.0, the older one, the flag dropped.
    private static final MethodHandle NEW_METADATA = metadataConstructor();
    // One line a broker, not one for each of its two plugins.
    private static final AtomicBoolean WARNED = new AtomicBoolean();

    /** The running broker's Kafka version, from the file its jars carry (AppInfoParser
     * reads the same, but moved package in 4.4); "unknown" where there is none. */
    public static String brokerVersion() {
        try (InputStream in =
                RemoteLogSegmentMetadata.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in == null) {
                return "unknown";
            }
            Properties properties = new Properties();
            properties.load(in);
            return properties.getProperty("version", "unknown").trim();
        } catch (IOException e) {
            return "unknown";
        }
    }

    /**
     * Fails configure() on a Kafka older than 3.7 with one line naming the version found
     * and the range; on one newer than 4.4 (or one whose version cannot be read) logs one
     * WARN and goes on.
     */
    public static void checkSupported(String version) {
        int[] found = majorMinor(version);
        if (found != null && compare(found, majorMinor(OLDEST)) < 0) {
            throw new ConfigException(
                    "The remotelog plugin runs on Apache Kafka "
                            + OLDEST
                            + " to "
                            + NEWEST
                            + ", and this broker is Kafka "
                            + version
                            + ": run remotelog's copy scheduler beside it instead");
        }
        String warning = beyondRange(version);
        if (warning != null && WARNED.compareAndSet(false, true)) {
            LOG.warn("{}", warning);
        }
    }

    /** The WARN a broker outside the tested range gets, or null inside it. */
    static String beyondRange(String version) {
        int[] found = majorMinor(version);
        if (found == null) {
            return "The remotelog plugin cannot tell this broker's Kafka version ("
                    + version
                    + "); it is tested on Kafka "
                    + OLDEST
                    + " to "
                    + NEWEST
                    + " and goes on";
        }
        if (compare(found, majorMinor(NEWEST)) > 0) {
            return "The remotelog plugin is tested on Kafka "
                    + OLDEST
                    + " to "
                    + NEWEST
                    + ", and this broker is Kafka "
                    + version
                    + "; it goes on with the newest API it knows";
        }
        return null;
    }

    /** [major, minor] of "3.9.1", "4.0.0-SNAPSHOT"...; null where it is no version. */
    static int[] majorMinor(String version) {
        String[] parts = version == null ? new String[0] : version.split("[.-]");
        if (parts.length < 2) {
            return null;
        }
        try {
            return new int[] {Integer.parseInt(parts[0]), Integer.parseInt(parts[1])};
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private static int compare(int[] a, int[] b) {
        return a[0] != b[0] ? Integer.compare(a[0], b[0]) : Integer.compare(a[1], b[1]);
    }

    public static boolean hasRetriable() {
        return NEW_RETRIABLE != null;
    }

    public static boolean hasTxnIndexFlag() {
        return IS_TXN_IDX_EMPTY != null;
    }

    /** A failure the same call may get past later: RetriableRemoteStorageException where
     * the broker has it, else RemoteStorageException. */
    public static RemoteStorageException retriable(String message, Throwable cause) {
        if (NEW_RETRIABLE == null) {
            return new RemoteStorageException(message, cause);
        }
        try {
            return (RemoteStorageException) NEW_RETRIABLE.invoke(message, cause);
        } catch (Throwable e) {
            throw new IllegalStateException("constructing RetriableRemoteStorageException", e);
        }
    }

    /** Whether `failure` is the broker's RetriableRemoteStorageException. */
    public static boolean isRetriable(Throwable failure) {
        return NEW_RETRIABLE != null
                && NEW_RETRIABLE.type().returnType().isInstance(failure);
    }

    /** The segment's transaction-index-empty flag; false where the broker has none. */
    public static boolean txnIdxEmpty(RemoteLogSegmentMetadata metadata) {
        if (IS_TXN_IDX_EMPTY == null) {
            return false;
        }
        try {
            return (boolean) IS_TXN_IDX_EMPTY.invoke(metadata);
        } catch (Throwable e) {
            throw new IllegalStateException("RemoteLogSegmentMetadata.isTxnIdxEmpty", e);
        }
    }

    /** RemoteLogSegmentMetadata, with the flag where the broker's class takes it. */
    public static RemoteLogSegmentMetadata metadata(
            RemoteLogSegmentId id,
            long startOffset,
            long endOffset,
            long maxTimestampMs,
            int brokerId,
            long eventTimestampMs,
            int segmentSizeInBytes,
            Optional<CustomMetadata> custom,
            RemoteLogSegmentState state,
            Map<Integer, Long> segmentLeaderEpochs,
            boolean txnIdxEmpty) {
        try {
            return (RemoteLogSegmentMetadata)
                    NEW_METADATA.invoke(
                            id,
                            startOffset,
                            endOffset,
                            maxTimestampMs,
                            brokerId,
                            eventTimestampMs,
                            segmentSizeInBytes,
                            custom,
                            state,
                            segmentLeaderEpochs,
                            txnIdxEmpty);
        } catch (RuntimeException e) {
            throw e; // the constructor's own checks (IllegalArgumentException...)
        } catch (Throwable e) {
            throw new IllegalStateException("constructing RemoteLogSegmentMetadata", e);
        }
    }

    private static MethodHandle retriableConstructor() {
        try {
            Class<?> type = Class.forName(PACKAGE + "RetriableRemoteStorageException");
            return LOOKUP.findConstructor(
                    type, MethodType.methodType(void.class, String.class, Throwable.class));
        } catch (ReflectiveOperationException | LinkageError e) {
            return null; // Kafka before 4.2
        }
    }

    private static MethodHandle txnIdxEmptyGetter() {
        try {
            return LOOKUP.findVirtual(
                    RemoteLogSegmentMetadata.class,
                    "isTxnIdxEmpty",
                    MethodType.methodType(boolean.class));
        } catch (ReflectiveOperationException e) {
            return null; // Kafka before 4.0
        }
    }

    private static MethodHandle metadataConstructor() {
        MethodType older =
                MethodType.methodType(
                        void.class,
                        RemoteLogSegmentId.class,
                        long.class,
                        long.class,
                        long.class,
                        int.class,
                        long.class,
                        int.class,
                        Optional.class,
                        RemoteLogSegmentState.class,
                        Map.class);
        try {
            return LOOKUP.findConstructor(
                    RemoteLogSegmentMetadata.class, older.appendParameterTypes(boolean.class));
        } catch (ReflectiveOperationException e) {
            try { // Kafka before 4.0
                return MethodHandles.dropArguments(
                        LOOKUP.findConstructor(RemoteLogSegmentMetadata.class, older),
                        older.parameterCount(),
                        boolean.class);
            } catch (ReflectiveOperationException missing) {
                throw new IllegalStateException(
                        "this broker's RemoteLogSegmentMetadata has no constructor the plugin knows",
                        missing);
            }
        }
    }
}
