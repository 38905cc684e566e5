package dev.remotelog.kafka;

import com.google.protobuf.ByteString;
import com.google.protobuf.UnsafeByteOperations;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataRequest;
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
 * SegmentStoreService call with a deadline. Settings under `rsm.config.`:
 * `segment.store.address`, optional `client.tls.*` and `client.auth.token.file`,
 * `client.timeout.ms`, `client.copy.timeout.ms`, `copy.chunk.bytes`, `fetch.urls.enabled`.
 */
public final class RemotelogStorageManager implements RemoteStorageManager {
    static final String PREFIX = "rsm.config.";
    static final String ADDRESS = "segment.store.address";

    private ServiceChannel service;
    private Settings settings;
    private SegmentStoreServiceGrpc.SegmentStoreServiceStub copies;
    private SegmentStoreServiceGrpc.SegmentStoreServiceBlockingStub calls;
    private FetchUrls fetchUrls;

    /** For the broker, which configures it by its properties. */
    public RemotelogStorageManager() {}

    @Override
    public void configure(Map<String, ?> configs) {
        use(ServiceChannel.configure(configs, PREFIX, ADDRESS));
    }

    /** Calls go through `service` from now on (configure's, or a test's in-process one). */
    void use(ServiceChannel service) {
        this.service = service;
        settings = service.settings();
        copies = SegmentStoreServiceGrpc.newStub(service.channel());
        calls = SegmentStoreServiceGrpc.newBlockingStub(service.channel());
        fetchUrls = settings.fetchUrls() ? new FetchUrls(settings.timeoutMs()) : null;
    }

    private SegmentStoreServiceGrpc.SegmentStoreServiceBlockingStub call() {
        return calls.withDeadlineAfter(settings.timeoutMs(), TimeUnit.MILLISECONDS);
    }

    @Override
    public Optional<CustomMetadata> copyLogSegmentData(
            RemoteLogSegmentMetadata metadata, LogSegmentData data) throws RemoteStorageException {
        String what = "CopyLogSegmentData(" + metadata.remoteLogSegmentId() + ")";
        CopyCall call = new CopyCall();
        copies.withDeadlineAfter(settings.copyTimeoutMs(), TimeUnit.MILLISECONDS)
                .copyLogSegmentData(call);
        try {
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
            var response =
                    call.result.get(settings.copyTimeoutMs() + 5_000, TimeUnit.MILLISECONDS);
            return Protos.custom(response.hasCustomMetadata(), response.getCustomMetadata());
        } catch (ExecutionException e) {
            if (e.getCause() instanceof StatusRuntimeException) {
                StatusRuntimeException failure = (StatusRuntimeException) e.getCause();
                RemoteStorageException translated = Failures.translate(what, failure);
                if (Failures.retriable(failure)) {
                    // Kafka deletes a copy that failed (the attempt's metadata and what
                    // reached the store, again at each expiration run until done) only
                    // when it failed for good; after a retriable failure it copies again
                    // under a new id and leaves the attempt in COPY_SEGMENT_STARTED, where
                    // it stops the expiration task's walk of the partition's segments.
                    throw new RemoteStorageException(
                            what + " failed (" + failure.getStatus().getCode()
                                    + "); Kafka deletes the attempt and copies again",
                            failure);
                }
                throw translated;
            }
            throw new RemoteStorageException(what + " failed", e.getCause());
        } catch (IOException e) {
            call.abandon(e);
            throw new RemoteStorageException(what + ": reading the segment's files failed", e);
        } catch (InterruptedException e) {
            call.abandon(e);
            Thread.currentThread().interrupt();
            throw KafkaApi.retriable(what + " was interrupted", e);
        } catch (TimeoutException e) {
            call.abandon(e);
            throw KafkaApi.retriable(what + " got no answer in time", e);
        }
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

    private static boolean sendChunk(CopyCall call, SegmentFile file, long position, ByteString data)
            throws InterruptedException {
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
        return fetch(metadata, startPosition, endPosition);
    }

    private InputStream fetch(RemoteLogSegmentMetadata metadata, int start, Integer end)
            throws RemoteStorageException {
        if (fetchUrls != null) {
            InputStream byUrl =
                    fetchUrls.open(metadata.remoteLogSegmentId(), start, end, urlsOf(metadata));
            if (byUrl != null) {
                return byUrl;
            }
        }
        FetchLogSegmentRequest.Builder request =
                FetchLogSegmentRequest.newBuilder()
                        .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                        .setStartPosition(start);
        if (end != null) {
            request.setEndPosition(end);
        }
        return ResponseStream.open(
                "FetchLogSegment(" + metadata.remoteLogSegmentId() + ", " + start + ")",
                () -> call().fetchLogSegment(request.build()),
                FetchLogSegmentResponse::getData);
    }

    private Supplier<GetLogSegmentUrlResponse> urlsOf(RemoteLogSegmentMetadata metadata) {
        return () ->
                call().getLogSegmentUrl(
                        GetLogSegmentUrlRequest.newBuilder()
                                .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
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
        if (fetchUrls != null && !auxState) {
            InputStream byUrl =
                    fetchUrls.openIndex(metadata.remoteLogSegmentId(), indexType, urlsOf(metadata));
            if (byUrl != null) {
                return byUrl;
            }
        }
        FetchIndexRequest request =
                FetchIndexRequest.newBuilder()
                        .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                        .setIndexType(Protos.indexType(indexType))
                        .build();
        return ResponseStream.open(
                "FetchIndex(" + metadata.remoteLogSegmentId() + ", " + indexType + ")",
                () -> call().fetchIndex(request),
                FetchIndexResponse::getData);
    }

    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata)
            throws RemoteStorageException {
        var request =
                DeleteLogSegmentDataRequest.newBuilder()
                        .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                        .build();
        Failures.call(
                "DeleteLogSegmentData(" + metadata.remoteLogSegmentId() + ")",
                () -> call().deleteLogSegmentData(request));
    }

    @Override
    public void close() {
        if (service != null) {
            service.close();
        }
    }
}
