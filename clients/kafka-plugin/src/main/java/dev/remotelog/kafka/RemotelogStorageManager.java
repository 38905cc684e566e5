package dev.remotelog.kafka;

import com.google.protobuf.ByteString;
import com.google.protobuf.UnsafeByteOperations;
import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.fetch.UrlReader;
import dev.remotelog.kafka.metrics.BrokerRegistry;
import dev.remotelog.kafka.metrics.Instruments;
import dev.remotelog.kafka.rpc.Failures;
import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.rpc.ResponseStream;
import dev.remotelog.kafka.rpc.ServiceChannel;
import dev.remotelog.kafka.storage.CopyCall;
import dev.remotelog.kafka.storage.DirectCopy;
import dev.remotelog.kafka.storage.NextSegmentLookup;
import dev.remotelog.kafka.storage.NextSegments;
import dev.remotelog.kafka.util.Warnings;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.apache.kafka.common.metrics.Monitorable;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataRequest;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataResponse;
import remotelog.api.segmentstore.v1.SegmentStore.DeleteLogSegmentDataRequest;
import remotelog.api.segmentstore.v1.SegmentStore.FetchIndexRequest;
import remotelog.api.segmentstore.v1.SegmentStore.FetchIndexResponse;
import remotelog.api.segmentstore.v1.SegmentStore.FetchLogSegmentRequest;
import remotelog.api.segmentstore.v1.SegmentStore.FetchLogSegmentResponse;
import remotelog.api.segmentstore.v1.SegmentStore.GetLogSegmentUrlRequest;
import remotelog.api.segmentstore.v1.SegmentStore.GetLogSegmentUrlResponse;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentDataChunk;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFile;
import remotelog.api.segmentstore.v1.SegmentStoreServiceGrpc;

/**
 * Kafka's RemoteStorageManager over remotelog's segment store: each method one
 * SegmentStoreService call with a deadline. Settings under `rsm.config.`: see Settings.
 */
public final class RemotelogStorageManager implements RemoteStorageManager, Monitorable {
    private static final Logger LOG = LoggerFactory.getLogger(RemotelogStorageManager.class);

    private ServiceChannel service;
    private final BrokerRegistry broker = new BrokerRegistry();
    private Settings settings;
    private SegmentStoreServiceGrpc.SegmentStoreServiceStub copies;
    private SegmentStoreServiceGrpc.SegmentStoreServiceBlockingStub calls;
    private UrlReader urlReader;
    private NextSegments nextSegments;
    private NextSegmentLookup nextSegmentLookup;
    private long followWithinBytes;
    private DirectCopy direct;
    private final Warnings unsupportedCopies = new Warnings(LOG, TimeUnit.MINUTES.toNanos(5));
    private final AtomicInteger copiesInFlight = new AtomicInteger();
    private Sensor copyBytes;
    private Sensor fetchBytes;
    private Sensor logReadsByUrl;
    private Sensor logReadsByStream;
    private Sensor indexReadsByUrl;
    private Sensor indexReadsByStream;

    /** For the broker, which configures it by its properties. */
    public RemotelogStorageManager() {}

    @Override
    public void configure(Map<String, ?> configs) {
        use(ServiceChannel.configure(configs, Settings.Role.STORAGE));
    }

    /** Kafka 4.1+ calls this after configure() when the plugin is on the broker's class
     * path (it wraps one loaded by `remote.log.*.class.path` in a class that hides it). */
    @Override
    public void withPluginMetrics(PluginMetrics metrics) {
        broker.offer(metrics);
    }

    /** Calls go through `service` from now on (configure's, or a test's in-process one). */
    void use(ServiceChannel service) {
        close(); // a second configure() replaces the first's channel
        this.service = service;
        settings = service.settings();
        copies = SegmentStoreServiceGrpc.newStub(service.channel());
        calls = SegmentStoreServiceGrpc.newBlockingStub(service.channel());
        direct = new DirectCopy(settings, () -> calls);
        Instruments instruments = service.instruments();
        Sensor urlRetries =
                instruments.counter("url-read-retries", "Ranged GETs asked again after a 5xx answer or a cut");
        urlReader =
                settings.fetchUrls()
                        ? new UrlReader(settings.timeoutMs(), settings.fetchFileUrlRoots(), urlRetries::record)
                        : null;
        if (urlReader != null && settings.readAheadChunks() > 0) {
            Sensor fetchedAhead =
                    instruments.counter(
                            "read-ahead-chunks", "Chunks of segment logs and indexes asked for ahead of a reader");
            Sensor hits =
                    instruments.counter(
                            "read-ahead-hits", "Chunks a reader found held or on their way instead of asking the store");
            Sensor hedged =
                    instruments.counter(
                            "hedged-reads", "Read-ahead chunks asked a second time because the first GET was late");
            urlReader.readAhead(
                    settings.readAheadChunkBytes(),
                    settings.readAheadChunks(),
                    settings.readAheadMaxBytes(),
                    settings.hedgePercentile(),
                    fetchedAhead::record,
                    hits::record,
                    hedged::record);
        }
        broker.attach(instruments);
        nextSegmentLookup = NextSegmentLookup.open(settings, instruments).orElse(null);
        if (nextSegmentLookup != null) {
            Sensor prepared =
                    instruments.counter(
                            "next-segments-prepared",
                            "Segments looked up (and their URLs and first chunks asked for) before Kafka read them");
            nextSegments = new NextSegments(nextSegmentLookup, this::prepare, prepared::record);
        }
        // Near enough to its end that the next segment's first chunks would be read ahead
        // next if the two were one log.
        followWithinBytes = (long) (Math.max(settings.readAheadChunks(), 1) + 1) * settings.readAheadChunkBytes();
        instruments.gauge("copies-in-flight", "Segment copies under way", copiesInFlight::get);
        copyBytes = instruments.sum("copy-bytes", "Bytes of segment files sent to the store");
        fetchBytes = instruments.sum("fetch-bytes", "Bytes of segments and indexes the broker read");
        logReadsByUrl = instruments.counter("log-reads-by-url", "Segment log reads by the store's URLs");
        logReadsByStream = instruments.counter("log-reads-by-stream", "Segment log reads through FetchLogSegment");
        indexReadsByUrl = instruments.counter("index-reads-by-url", "Index reads by the store's URLs");
        indexReadsByStream = instruments.counter("index-reads-by-stream", "Index reads through FetchIndex");
    }

    private SegmentStoreServiceGrpc.SegmentStoreServiceBlockingStub call() {
        return calls.withDeadlineAfter(settings.timeoutMs(), TimeUnit.MILLISECONDS);
    }

    @Override
    public Optional<CustomMetadata> copyLogSegmentData(
            RemoteLogSegmentMetadata metadata, LogSegmentData data) throws RemoteStorageException {
        String what = "CopyLogSegmentData(" + metadata.remoteLogSegmentId() + ")";
        long started = System.nanoTime();
        CopyCall call = null;
        copiesInFlight.incrementAndGet();
        try {
            CopyLogSegmentDataResponse response = directly(metadata, data);
            String how = " by " + settings.copyMethod();
            if (response == null) {
                how = " by stream";
                call = new CopyCall();
                copies.withDeadlineAfter(settings.copyTimeoutMs(), TimeUnit.MILLISECONDS)
                        .copyLogSegmentData(call);
                response = copy(call, metadata, data);
            }
            logDone("Copied", "to", metadata, started, how);
            return Protos.custom(response.hasCustomMetadata(), response.getCustomMetadata());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw failed(what, "was interrupted", e);
        } catch (TimeoutException e) {
            throw failed(what, "got no answer in " + settings.copyTimeoutMs() + " ms", e);
        } catch (ClosedByInterruptException e) {
            // Kafka cancels a copy task by interrupting it, which closes the file being read.
            throw failed(what, "was interrupted", e);
        } catch (IOException e) {
            throw failed(what, "could not read or send the segment's files", e);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof StatusRuntimeException) {
                throw refusedOrFailed(what, (StatusRuntimeException) cause);
            }
            throw failed(what, "failed", cause);
        } catch (StatusRuntimeException e) {
            throw refusedOrFailed(what, e);
        } catch (RuntimeException e) {
            throw failed(what, "failed", e);
        } finally {
            if (call != null) {
                call.abandonUnlessDone();
            }
            copiesInFlight.decrementAndGet();
        }
    }

    /** The copy by copy.method path or url, or null where it takes the stream (that method is
     * off, or the store does not do it: said once, then paused). */
    private CopyLogSegmentDataResponse directly(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws IOException, InterruptedException {
        if (!direct.enabled()) {
            return null;
        }
        try {
            CopyLogSegmentDataResponse response = direct.copy(metadata, data);
            copyBytes.record(filesBytes(data)); // every file, as a stream copy counts them
            return response;
        } catch (DirectCopy.Unsupported e) {
            String then = e.paused ? "copies take CopyLogSegmentData for 5 minutes" : "this copy takes CopyLogSegmentData";
            unsupportedCopies.warn(
                    "The segment store does not copy by copy.method=" + settings.copyMethod() + " ("
                            + e.getMessage() + "): " + then);
            return null;
        }
    }

    /** Bytes of all the segment's files: its log, indexes, snapshot and checkpoint. */
    private static long filesBytes(LogSegmentData data) throws IOException {
        long bytes = Files.size(data.logSegment()) + Files.size(data.offsetIndex())
                + Files.size(data.timeIndex()) + Files.size(data.producerSnapshotIndex())
                + data.leaderEpochIndex().remaining();
        if (data.transactionIndex().isPresent()) {
            bytes += Files.size(data.transactionIndex().get());
        }
        return bytes;
    }

    /** A copy the store refused (bad input, a clash) fails as any other: Kafka deletes its
     * attempt only after a RemoteStorageException, and an unchecked exception would leave
     * the attempt COPY_SEGMENT_STARTED for good and a new one at each run of the task. */
    private static RemoteStorageException refusedOrFailed(String what, StatusRuntimeException failure) {
        String reason = Failures.reason(failure);
        return failed(
                what,
                (Failures.unchecked(what, failure) != null ? "was refused (" : "failed (")
                        + failure.getStatus().getCode()
                        + (reason.isEmpty() ? "" : " " + reason)
                        + ")",
                failure);
    }

    /**
     * One rule for every failed copy: a RemoteStorageException that is not retriable.
     * Kafka deletes the attempt (its metadata and what reached the store) after any
     * RemoteStorageException; a retriable one would only make the task log less.
     */
    private static RemoteStorageException failed(String what, String how, Throwable cause) {
        return new RemoteStorageException(
                what + " " + how + "; Kafka deletes the attempt and copies again", cause);
    }

    private CopyLogSegmentDataResponse copy(
            CopyCall call, RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws IOException, InterruptedException, ExecutionException, TimeoutException {
        boolean sent =
                call.send(
                                CopyLogSegmentDataRequest.newBuilder()
                                        .setMetadata(Protos.metadata(metadata))
                                        .build())
                        && sendFile(call, SegmentFile.SEGMENT_FILE_LOG, data.logSegment())
                        && sendFile(call, SegmentFile.SEGMENT_FILE_OFFSET_INDEX, data.offsetIndex())
                        && sendFile(call, SegmentFile.SEGMENT_FILE_TIME_INDEX, data.timeIndex())
                        && (data.transactionIndex().isEmpty()
                                || sendFile(
                                        call,
                                        SegmentFile.SEGMENT_FILE_TRANSACTION_INDEX,
                                        data.transactionIndex().get()))
                        && sendFile(
                                call,
                                SegmentFile.SEGMENT_FILE_PRODUCER_SNAPSHOT,
                                data.producerSnapshotIndex())
                        && sendBytes(
                                call,
                                SegmentFile.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT,
                                data.leaderEpochIndex().duplicate(),
                                0);
        if (sent) {
            call.finish();
        }
        // The call's own deadline ends it first; this wait only outlives a transport
        // that never reports its end.
        return call.result.get(settings.copyTimeoutMs() + 5_000, TimeUnit.MILLISECONDS);
    }

    private boolean sendFile(CopyCall call, SegmentFile file, Path path)
            throws IOException, InterruptedException {
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
            long position = 0;
            while (true) {
                ByteBuffer buffer = ByteBuffer.allocate(settings.chunkBytes());
                while (buffer.hasRemaining() && channel.read(buffer, position + buffer.position()) > 0) {
                    // a file read may return less than asked: fill the chunk
                }
                buffer.flip();
                boolean last = buffer.remaining() < settings.chunkBytes();
                if (buffer.hasRemaining() || position == 0) {
                    if (!sendChunk(call, file, position, UnsafeByteOperations.unsafeWrap(buffer))) {
                        return false;
                    }
                }
                position += buffer.remaining();
                if (last) {
                    return true;
                }
            }
        }
    }

    private boolean sendBytes(CopyCall call, SegmentFile file, ByteBuffer bytes, long position)
            throws InterruptedException {
        do {
            ByteBuffer chunk = bytes.slice();
            chunk.limit(Math.min(chunk.remaining(), settings.chunkBytes()));
            if (!sendChunk(call, file, position, ByteString.copyFrom(chunk))) {
                return false;
            }
            position += chunk.limit();
            bytes.position(bytes.position() + chunk.limit());
        } while (bytes.hasRemaining());
        return true;
    }

    private boolean sendChunk(CopyCall call, SegmentFile file, long position, ByteString data)
            throws InterruptedException {
        copyBytes.record(data.size());
        return call.send(
                CopyLogSegmentDataRequest.newBuilder()
                        .setChunk(
                                SegmentDataChunk.newBuilder()
                                        .setFile(file)
                                        .setPosition(position)
                                        .setData(data))
                        .build());
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition)
            throws RemoteStorageException {
        return fetch(metadata, startPosition, null);
    }

    @Override
    public InputStream fetchLogSegment(
            RemoteLogSegmentMetadata metadata, int startPosition, int endPosition)
            throws RemoteStorageException {
        return fetch(metadata, startPosition, (long) endPosition);
    }

    /**
     * KIP-1333's overload, for segments past 2 GiB: a Kafka that has it calls it in place
     * of the int one, which it deprecates. Not an override on the 3.7 API this compiles
     * against, where it is an extra method nobody calls.
     */
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, long startPosition)
            throws RemoteStorageException {
        return fetch(metadata, startPosition, null);
    }

    /** KIP-1333's overload of the bounded read; see fetchLogSegment(metadata, long). */
    public InputStream fetchLogSegment(
            RemoteLogSegmentMetadata metadata, long startPosition, long endPosition)
            throws RemoteStorageException {
        return fetch(metadata, startPosition, endPosition);
    }

    private InputStream fetch(RemoteLogSegmentMetadata metadata, long start, Long end)
            throws RemoteStorageException {
        InputStream opened = open(metadata, start, end);
        NextSegments next = nextSegments;
        if (next != null && metadata.segmentSizeInBytes() - start <= followWithinBytes) {
            next.follow(metadata); // after this segment's own URL ask, not racing it
        }
        return opened;
    }

    private InputStream open(RemoteLogSegmentMetadata metadata, long start, Long end)
            throws RemoteStorageException {
        if (urlReader != null) {
            InputStream byUrl =
                    urlReader.open(
                            metadata.remoteLogSegmentId(),
                            start,
                            end,
                            metadata.segmentSizeInBytes(),
                            urlsOf(metadata));
            if (byUrl != null) {
                logReadsByUrl.record();
                return Instruments.counted(byUrl, fetchBytes);
            }
        }
        FetchLogSegmentRequest.Builder request =
                FetchLogSegmentRequest.newBuilder()
                        .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                        .setStartPosition(start);
        if (end != null) {
            request.setEndPosition(end);
        }
        logReadsByStream.record();
        InputStream stream =
                ResponseStream.open(
                        "FetchLogSegment(" + metadata.remoteLogSegmentId() + ", " + start + ")",
                        () -> call().fetchLogSegment(request.build()),
                        FetchLogSegmentResponse::getData);
        return Instruments.counted(stream, fetchBytes);
    }

    /** Gets the reads of a segment Kafka is about to cross into ready (NextSegments). */
    private void prepare(RemoteLogSegmentMetadata next) {
        UrlReader urls = urlReader;
        if (urls != null) {
            urls.prepare(next.remoteLogSegmentId(), next.segmentSizeInBytes(), urlsOf(next));
        }
    }

    private Supplier<GetLogSegmentUrlResponse> urlsOf(RemoteLogSegmentMetadata metadata) {
        return () ->
                call().getLogSegmentUrl(
                        GetLogSegmentUrlRequest.newBuilder()
                                .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                                .setChunksAccepted(true) // UrlReader decodes them
                                .build());
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType)
            throws RemoteStorageException {
        // A follower's aux state (its leader epochs and producer snapshot) is read
        // through the store even where URLs are on: such reads are rare and small, and
        // only there does the store count them (and their failures) as Kafka's
        // BuildRemoteLogAuxState metrics.
        boolean auxState = indexType == IndexType.LEADER_EPOCH || indexType == IndexType.PRODUCER_SNAPSHOT;
        if (urlReader != null && !auxState) {
            InputStream byUrl =
                    urlReader.openIndex(
                            metadata.remoteLogSegmentId(), indexType, metadata.segmentSizeInBytes(), urlsOf(metadata));
            if (byUrl != null) {
                indexReadsByUrl.record();
                return Instruments.counted(byUrl, fetchBytes);
            }
        }
        FetchIndexRequest request =
                FetchIndexRequest.newBuilder()
                        .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                        .setIndexType(Protos.indexType(indexType))
                        .build();
        indexReadsByStream.record();
        InputStream stream =
                ResponseStream.open(
                        "FetchIndex(" + metadata.remoteLogSegmentId() + ", " + indexType + ")",
                        () -> call().fetchIndex(request),
                        FetchIndexResponse::getData);
        return Instruments.counted(stream, fetchBytes);
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata)
            throws RemoteStorageException {
        var request =
                DeleteLogSegmentDataRequest.newBuilder()
                        .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                        .build();
        long started = System.nanoTime();
        Failures.call(
                "DeleteLogSegmentData(" + metadata.remoteLogSegmentId() + ")",
                () -> call().deleteLogSegmentData(request));
        logDone("Deleted", "from", metadata, started, "");
    }

    /** One INFO line per copy or delete, as Aiven's plugin logs them: segment, size, time. */
    private static void logDone(
            String done, String preposition, RemoteLogSegmentMetadata metadata, long startedNanos, String how) {
        LOG.info(
                "{} segment {} of {} (offsets {}..{}, {} bytes) {} the segment store{} in {} ms",
                done,
                metadata.remoteLogSegmentId().id(),
                metadata.topicIdPartition(),
                metadata.startOffset(),
                metadata.endOffset(),
                metadata.segmentSizeInBytes(),
                preposition,
                how,
                TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startedNanos));
    }

    @Override
    public void close() {
        if (service != null) {
            service.close();
            service = null;
        }
        if (urlReader != null) {
            urlReader.close();
            urlReader = null;
        }
        if (direct != null) {
            direct.close();
            direct = null;
        }
        if (nextSegments != null) {
            nextSegments.close();
            nextSegments = null;
        }
        if (nextSegmentLookup != null) {
            nextSegmentLookup.close();
            nextSegmentLookup = null;
        }
    }
}
