package dev.remotelog.kafka.storage;

import com.google.protobuf.ByteString;
import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.rpc.Failures;
import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.transforms.SegmentEncoder;
import dev.remotelog.kafka.util.BulkInputStream;
import dev.remotelog.kafka.util.DaemonThreads;
import dev.remotelog.kafka.util.ObjectStoreAnswers;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.DigestInputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import remotelog.api.segmentstore.v1.SegmentStore.AbortSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.CompleteSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.CompleteSegmentUploadResponse;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataResponse;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentFilesRequest;
import remotelog.api.segmentstore.v1.SegmentStore.PrepareSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentDataChunk;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFile;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFilePath;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFileSize;
import remotelog.api.segmentstore.v1.SegmentStore.StartSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.StartSegmentUploadResponse;
import remotelog.api.segmentstore.v1.SegmentStore.UploadPart;
import remotelog.api.segmentstore.v1.SegmentStore.UploadTransforms;
import remotelog.api.segmentstore.v1.SegmentStore.UploadedChunks;
import remotelog.api.segmentstore.v1.SegmentStore.UploadedPart;
import remotelog.api.segmentstore.v1.SegmentStoreServiceGrpc.SegmentStoreServiceBlockingStub;

/**
 * Copies whose bytes skip the store's CopyLogSegmentData stream (copy.method): by path,
 * the store reading the broker's files itself; by URL, the broker PUTting the parts of
 * the multipart upload the store starts, in parallel, each streamed from the segment's
 * file. Each part's MD5 is taken first: the store signs it into the part's URL, so the
 * object store takes those bytes and no others, on any bucket encryption. The store
 * checks every part and the indexes arrived before it makes the segment visible. URLs
 * are never logged: errors name the part, not its URL. A store that compresses or
 * encrypts new segments says how first (PrepareSegmentUpload): the log is then encoded
 * as chunks into a temporary file (java.io.tmpdir), whose parts are planned and PUT, and
 * the segment's data key is forgotten when the copy is over.
 */
public final class DirectCopy {
    private static final Logger LOG = LoggerFactory.getLogger(DirectCopy.class);
    /** A store that did not do the method is asked again after this long. */
    private static final long UNSUPPORTED_PAUSE_NANOS = TimeUnit.MINUTES.toNanos(5);
    private static final int MAX_PUT_ATTEMPTS = 5;
    private static final long FIRST_BACKOFF_MS = 100;
    private static final long ABORT_TIMEOUT_MS = 5_000;
    /** S3's most parts of one upload. */
    private static final long MAX_PARTS = 10_000;

    /** This copy takes the stream: the store does not do the method (UNIMPLEMENTED, and
     * then copies take the stream for a while), or cannot read this segment's files. */
    public static final class Unsupported extends Exception {
        public final boolean paused;

        public Unsupported(String message, boolean paused) {
            super(message);
            this.paused = paused;
        }
    }

    private final Settings settings;
    private final Supplier<SegmentStoreServiceBlockingStub> calls;
    private final AtomicLong offUntil = new AtomicLong(System.nanoTime());
    private HttpClient http;
    private ExecutorService httpThreads;

    public DirectCopy(Settings settings, Supplier<SegmentStoreServiceBlockingStub> calls) {
        this.settings = settings;
        this.calls = calls;
    }

    /** Whether copies take settings' copy.method now (not stream, and not paused). */
    public boolean enabled() {
        return !settings.copyMethod().equals("stream") && System.nanoTime() - offUntil.get() >= 0;
    }

    /** The segment copied by the configured method; Unsupported if the store does not do it
     * (then the copies take the stream for a while). */
    public CopyLogSegmentDataResponse copy(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws Unsupported, IOException, InterruptedException {
        try {
            if (settings.copyMethod().equals("path")) {
                return byPath(metadata, data);
            }
            return byUrl(metadata, data);
        } catch (StatusRuntimeException e) {
            if (e.getStatus().getCode() == Status.Code.UNIMPLEMENTED) {
                offUntil.set(System.nanoTime() + UNSUPPORTED_PAUSE_NANOS);
                throw new Unsupported(e.getStatus().getDescription(), true);
            }
            if (unreadableByTheStore(e)) {
                // The store's host does not see this file as the broker does (another
                // mount, copy.paths.allowed, a file rolled away): the broker can still send it.
                throw new Unsupported(e.getStatus().getDescription(), false);
            }
            throw e;
        }
    }

    /** A path copy refused because the store cannot open or fully read a file it was named. */
    private boolean unreadableByTheStore(StatusRuntimeException failure) {
        return settings.copyMethod().equals("path")
                && failure.getStatus().getCode() == Status.Code.INVALID_ARGUMENT
                && Failures.field(failure).startsWith("files.");
    }

    private SegmentStoreServiceBlockingStub copyCall() {
        return calls.get().withDeadlineAfter(settings.copyTimeoutMs(), TimeUnit.MILLISECONDS);
    }

    // -- by path ---------------------------------------------------------------

    private CopyLogSegmentDataResponse byPath(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws IOException {
        CopyLogSegmentFilesRequest.Builder request =
                CopyLogSegmentFilesRequest.newBuilder().setMetadata(Protos.metadata(metadata));
        for (Map.Entry<SegmentFile, Path> file : files(data).entrySet()) {
            request.addFiles(
                    SegmentFilePath.newBuilder()
                            .setFile(file.getKey())
                            .setPath(file.getValue().toAbsolutePath().toString())
                            .setSize(Files.size(file.getValue())));
        }
        request.addInlineFiles(
                SegmentDataChunk.newBuilder()
                        .setFile(SegmentFile.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT)
                        .setData(ByteString.copyFrom(data.leaderEpochIndex().duplicate())));
        var response = copyCall().copyLogSegmentFiles(request.build());
        return result(response.hasCustomMetadata(), response.getCustomMetadata());
    }

    /** The segment's files on disk, in the order the store lists them. */
    private static Map<SegmentFile, Path> files(LogSegmentData data) {
        Map<SegmentFile, Path> files = new LinkedHashMap<>();
        files.put(SegmentFile.SEGMENT_FILE_LOG, data.logSegment());
        files.put(SegmentFile.SEGMENT_FILE_OFFSET_INDEX, data.offsetIndex());
        files.put(SegmentFile.SEGMENT_FILE_TIME_INDEX, data.timeIndex());
        data.transactionIndex().ifPresent(t -> files.put(SegmentFile.SEGMENT_FILE_TRANSACTION_INDEX, t));
        files.put(SegmentFile.SEGMENT_FILE_PRODUCER_SNAPSHOT, data.producerSnapshotIndex());
        return files;
    }

    // -- by URL ----------------------------------------------------------------

    private CopyLogSegmentDataResponse byUrl(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(settings.copyTimeoutMs());
        Map<SegmentFile, Path> files = files(data);
        byte[] checkpoint = bytes(data.leaderEpochIndex());
        List<SegmentFileSize> sizes = new ArrayList<>();
        for (Map.Entry<SegmentFile, Path> file : files.entrySet()) {
            sizes.add(size(file.getKey(), Files.size(file.getValue())));
        }
        sizes.add(size(SegmentFile.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT, checkpoint.length));
        UploadTransforms transforms = prepare(metadata);
        Path logFile = files.get(SegmentFile.SEGMENT_FILE_LOG);
        if (transforms == null) {
            try (FileChannel log = FileChannel.open(logFile, StandardOpenOption.READ)) {
                return put(metadata, sizes, log, indexes(files, checkpoint), null, deadline);
            }
        }
        byte[] dataKey = transforms.getDataKey().toByteArray();
        Path encoded = Files.createTempFile("remotelog-" + metadata.remoteLogSegmentId().id() + "-", ".chunks");
        try (FileChannel source = FileChannel.open(logFile, StandardOpenOption.READ);
                FileChannel log = FileChannel.open(encoded, StandardOpenOption.READ, StandardOpenOption.WRITE,
                        StandardOpenOption.DELETE_ON_CLOSE)) {
            var id = metadata.remoteLogSegmentId();
            SegmentEncoder encoder =
                    new SegmentEncoder(
                            id.topicIdPartition().topicId(),
                            id.id(),
                            Math.toIntExact(transforms.getChunkSize()),
                            transforms.getCompressionEnabled() ? transforms.getZstdLevel() : null,
                            transforms.getCompressionHeuristicEnabled(),
                            dataKey);
            long[] logSizes = encoder.encodeLog(source, log, threads(), settings.copyParallelParts(), deadline);
            SegmentEncoder.Encoded indexes = encoder.encodeIndexes(indexes(files, checkpoint));
            UploadedChunks.Builder chunks =
                    UploadedChunks.newBuilder()
                            .setChunkSize(transforms.getChunkSize())
                            .addAllLogStoredSizes(longs(logSizes))
                            .addAllIndexesStoredSizes(longs(indexes.storedSizes))
                            .setCompressed(encoder.compressed());
            if (dataKey.length > 0) {
                chunks.setWrappedDataKey(transforms.getWrappedDataKey());
            }
            return put(metadata, sizes, log, indexes.bytes, chunks.build(), deadline);
        } finally {
            java.util.Arrays.fill(dataKey, (byte) 0);
            Files.deleteIfExists(encoded);
        }
    }

    /** How the store has this segment encoded before it is PUT; null: as it is (a store
     * that transforms nothing, or one older than PrepareSegmentUpload). */
    private UploadTransforms prepare(RemoteLogSegmentMetadata metadata) {
        try {
            var answer =
                    copyCall()
                            .prepareSegmentUpload(
                                    PrepareSegmentUploadRequest.newBuilder()
                                            .setMetadata(Protos.metadata(metadata))
                                            .build());
            return answer.hasTransforms() ? answer.getTransforms() : null;
        } catch (StatusRuntimeException e) {
            if (e.getStatus().getCode() == Status.Code.UNIMPLEMENTED && Failures.reason(e).isEmpty()) {
                return null; // no such method: StartSegmentUpload says whether plain bytes do
            }
            throw e;
        }
    }

    private static List<Long> longs(long[] values) {
        List<Long> list = new ArrayList<>(values.length);
        for (long value : values) {
            list.add(value);
        }
        return list;
    }

    /** The log (its stored bytes, as its parts go) and the indexes object PUT by the URLs
     * the store signs for their MD5s, then the upload completed; aborted on any failure. */
    private CopyLogSegmentDataResponse put(
            RemoteLogSegmentMetadata metadata,
            List<SegmentFileSize> sizes,
            FileChannel log,
            byte[] indexes,
            UploadedChunks chunks,
            long deadline)
            throws IOException, InterruptedException {
        String indexesMd5 = hex(md5().digest(indexes));
        List<UploadedPart> parts = plan(log, deadline);
        StartSegmentUploadRequest.Builder start =
                StartSegmentUploadRequest.newBuilder()
                        .setMetadata(Protos.metadata(metadata))
                        .addAllFiles(sizes)
                        .setCopyTimeoutMs(settings.copyTimeoutMs())
                        .addAllLogParts(parts)
                        .setIndexesMd5(indexesMd5);
        CompleteSegmentUploadRequest.Builder completion =
                CompleteSegmentUploadRequest.newBuilder()
                        .setMetadata(Protos.metadata(metadata))
                        .addAllFiles(sizes)
                        .addAllLogParts(parts);
        if (chunks != null) {
            start.setChunks(chunks);
            completion.setChunks(chunks);
        }
        StartSegmentUploadResponse upload = copyCall().startSegmentUpload(start.build());
        boolean completed = false;
        try {
            putLog(log, upload, parts, deadline);
            put("the indexes", upload.getIndexesUrl(), deadline, indexes.length, indexesMd5,
                    upload.getIndexesHeadersMap(), () -> new java.io.ByteArrayInputStream(indexes));
            var response = complete(completion.setUploadId(upload.getUploadId()).build());
            completed = true;
            return result(response.hasCustomMetadata(), response.getCustomMetadata());
        } finally {
            if (!completed) {
                abort(metadata, upload.getUploadId());
            }
        }
    }

    /** The log's parts, copy.url.part.bytes each (more where S3's 10,000 would not hold
     * it), each with the MD5 the store signs into its URL: taken before any byte is PUT,
     * copy.url.parallel.parts at a time. */
    private List<UploadedPart> plan(FileChannel log, long deadline) throws IOException, InterruptedException {
        long size = log.size();
        long partBytes = Math.max(settings.copyPartBytes(), -Math.floorDiv(-size, MAX_PARTS));
        int count = (int) Math.max(1, -Math.floorDiv(-size, partBytes));
        return inParallel(
                count,
                deadline,
                index -> {
                    long position = index * partBytes;
                    long bytes = Math.min(partBytes, size - position);
                    MessageDigest md5 = md5();
                    try (InputStream in = new DigestInputStream(new FileRange(log, position, bytes), md5)) {
                        in.transferTo(java.io.OutputStream.nullOutputStream());
                    }
                    return UploadedPart.newBuilder()
                            .setPartNumber(index + 1)
                            .setSize(bytes)
                            .setMd5(hex(md5.digest()))
                            .build();
                });
    }

    /** The store's check of what arrived. Bytes other than sent are a failed copy, not bad
     * input: Kafka then deletes the attempt and copies again (it cleans up only after a
     * RemoteStorageException). */
    private CompleteSegmentUploadResponse complete(CompleteSegmentUploadRequest request)
            throws IOException {
        try {
            return copyCall().completeSegmentUpload(request);
        } catch (StatusRuntimeException e) {
            if (e.getStatus().getCode() == Status.Code.INVALID_ARGUMENT) {
                throw new IOException("the store found other bytes than sent: " + e.getStatus().getDescription(), e);
            }
            throw e;
        }
    }

    /** What every copy answers, whichever its call. */
    private static CopyLogSegmentDataResponse result(boolean hasCustomMetadata, ByteString customMetadata) {
        var result = CopyLogSegmentDataResponse.newBuilder();
        if (hasCustomMetadata) {
            result.setCustomMetadata(customMetadata);
        }
        return result.build();
    }

    /** Best effort: what is not aborted here goes with Kafka's deletion of the attempt. */
    private void abort(RemoteLogSegmentMetadata metadata, String uploadId) {
        try {
            calls.get()
                    .withDeadlineAfter(ABORT_TIMEOUT_MS, TimeUnit.MILLISECONDS)
                    .abortSegmentUpload(
                            AbortSegmentUploadRequest.newBuilder()
                                    .setMetadata(Protos.metadata(metadata))
                                    .setUploadId(uploadId)
                                    .build());
        } catch (RuntimeException e) {
            LOG.debug("Could not abort the upload of {}: {}", metadata.remoteLogSegmentId(), e.toString());
        }
    }

    private static SegmentFileSize size(SegmentFile file, long size) {
        return SegmentFileSize.newBuilder().setFile(file).setSize(size).build();
    }

    private static byte[] bytes(ByteBuffer buffer) {
        ByteBuffer copy = buffer.duplicate();
        byte[] bytes = new byte[copy.remaining()];
        copy.get(bytes);
        return bytes;
    }

    /** The index files one after another, in SegmentFile's order (the store's index_order). */
    private static byte[] indexes(Map<SegmentFile, Path> files, byte[] checkpoint) throws IOException {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        for (SegmentFile file : SegmentFile.values()) {
            if (file == SegmentFile.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT) {
                out.write(checkpoint);
            } else if (file != SegmentFile.SEGMENT_FILE_LOG && files.containsKey(file)) {
                out.write(Files.readAllBytes(files.get(file)));
            }
        }
        return out.toByteArray();
    }

    /** Every part of the log PUT as planned, copy.url.parallel.parts of this segment at a
     * time (the broker's copies at once are Kafka's copier threads). */
    private void putLog(FileChannel log, StartSegmentUploadResponse upload, List<UploadedPart> parts, long deadline)
            throws IOException, InterruptedException {
        List<UploadPart> urls = upload.getLogPartsList();
        if (urls.size() != parts.size()) {
            throw new IOException("the store answered " + urls.size() + " parts for " + parts.size() + " planned");
        }
        inParallel(
                parts.size(),
                deadline,
                index -> {
                    UploadPart part = urls.get(index);
                    UploadedPart planned = parts.get(index);
                    if (part.getPartNumber() != planned.getPartNumber() || part.getSize() != planned.getSize()) {
                        throw new IOException("the store answered another part " + planned.getPartNumber());
                    }
                    put("part " + part.getPartNumber(), part.getUrl(), deadline, part.getSize(), planned.getMd5(),
                            Map.of(), () -> new FileRange(log, part.getPosition(), part.getSize()));
                    return part;
                });
    }

    interface Task<T> {
        T run(int index) throws Exception;
    }

    /** Tasks 0..count-1, copy.url.parallel.parts at a time, their results in order; the
     * first failure fails the copy. A task that finds no free slot before the copy's
     * deadline fails it too. */
    private <T> List<T> inParallel(int count, long deadline, Task<T> task) throws IOException, InterruptedException {
        List<CompletableFuture<T>> runs = new ArrayList<>();
        try {
            ExecutorService threads = threads();
            Semaphore slots = new Semaphore(settings.copyParallelParts());
            for (int i = 0; i < count; i++) {
                if (!slots.tryAcquire(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                    throw new IOException("part " + (i + 1) + " found no free thread before the copy's timeout");
                }
                CompletableFuture<T> run = new CompletableFuture<>();
                runs.add(run);
                int index = i;
                threads.execute(
                        () -> {
                            try {
                                run.complete(task.run(index));
                            } catch (Throwable e) {
                                run.completeExceptionally(e);
                            } finally {
                                slots.release();
                            }
                        });
                failFast(runs);
            }
            List<T> results = new ArrayList<>();
            for (CompletableFuture<T> run : runs) {
                results.add(await(run, deadline));
            }
            return results;
        } finally {
            for (CompletableFuture<T> run : runs) {
                run.cancel(true);
            }
        }
    }

    private static <T> void failFast(List<CompletableFuture<T>> runs) throws IOException {
        for (CompletableFuture<T> run : runs) {
            if (run.isCompletedExceptionally()) {
                await(run);
            }
        }
    }

    private static <T> void await(CompletableFuture<T> run) throws IOException {
        try {
            run.getNow(null);
        } catch (java.util.concurrent.CompletionException e) {
            throw asIo(e.getCause());
        }
    }

    private static <T> T await(CompletableFuture<T> run, long deadline) throws IOException, InterruptedException {
        try {
            return run.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (ExecutionException e) {
            throw asIo(e.getCause());
        } catch (TimeoutException e) {
            throw new IOException("the parts were not all PUT within the copy's timeout");
        }
    }

    private static IOException asIo(Throwable cause) {
        return cause instanceof IOException ? (IOException) cause : new IOException(cause);
    }

    /**
     * One PUT of `size` bytes from `body` (opened again for each attempt), with the MD5
     * its URL signs as Content-MD5 and the `headers` it signs: the object store takes those
     * bytes or answers 400 (BadDigest), whatever its encryption does to ETags. Retried on a
     * busy store (ObjectStoreAnswers) or a broken connection with backoff, within the deadline.
     */
    private void put(String what, String url, long deadline, long size, String md5, Map<String, String> headers,
            Opener body) throws IOException, InterruptedException {
        IOException last = null;
        String contentMd5 = java.util.Base64.getEncoder().encodeToString(unhex(md5));
        for (int attempt = 0; attempt < MAX_PUT_ATTEMPTS; attempt++) {
            if (attempt > 0) {
                long backoffMs = FIRST_BACKOFF_MS << Math.min(attempt - 1, 6);
                if (System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs) - deadline > 0) {
                    break;
                }
                Thread.sleep(backoffMs);
            }
            HttpRequest.Builder request =
                    HttpRequest.newBuilder(URI.create(url))
                            .timeout(Duration.ofNanos(Math.max(1, deadline - System.nanoTime())))
                            .header("Content-MD5", contentMd5)
                            .PUT(
                                    HttpRequest.BodyPublishers.fromPublisher(
                                            HttpRequest.BodyPublishers.ofInputStream(() -> opened(body)), size));
            headers.forEach(request::header);
            HttpResponse<String> response;
            try {
                response = client().send(request.build(), HttpResponse.BodyHandlers.ofString());
            } catch (IOException e) {
                last = new IOException(what + ": " + e.getClass().getSimpleName(), e);
                continue;
            }
            int status = response.statusCode();
            String code = ObjectStoreAnswers.errorCode(response.body());
            ObjectStoreAnswers.Meaning meaning = ObjectStoreAnswers.ofPut(status, code);
            if (meaning == ObjectStoreAnswers.Meaning.DONE) {
                return;
            }
            // The code says why (BadDigest, Md5Mismatch: the bytes are not the MD5's).
            last = new IOException(what + ": HTTP " + status + " to its PUT" + (code.isEmpty() ? "" : " (" + code + ")"));
            if (meaning != ObjectStoreAnswers.Meaning.BUSY) {
                break; // refused (other bytes, an expired or altered URL): another attempt would be too
            }
        }
        throw last;
    }

    interface Opener {
        InputStream open() throws IOException;
    }

    private static InputStream opened(Opener body) {
        try {
            return body.open();
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static MessageDigest md5() {
        try {
            return MessageDigest.getInstance("MD5");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java has MD5", e);
        }
    }

    private static byte[] unhex(String hex) {
        byte[] bytes = new byte[hex.length() / 2];
        for (int i = 0; i < bytes.length; i++) {
            bytes[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return bytes;
    }

    private static String hex(byte[] bytes) {
        StringBuilder hex = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            hex.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return hex.toString();
    }

    private synchronized ExecutorService threads() {
        if (httpThreads == null) {
            httpThreads = DaemonThreads.cached("remotelog-copy-urls");
        }
        return httpThreads;
    }

    private synchronized HttpClient client() {
        if (http == null) {
            http =
                    HttpClient.newBuilder()
                            .executor(threads())
                            .connectTimeout(Duration.ofMillis(Math.min(settings.timeoutMs(), 10_000)))
                            .build();
        }
        return http;
    }

    public synchronized void close() {
        http = null;
        if (httpThreads != null) {
            httpThreads.shutdownNow();
            httpThreads = null;
        }
    }

    /** `size` bytes of a file from `position`, by positional reads (parts share the channel). */
    private static final class FileRange extends BulkInputStream {
        private final FileChannel channel;
        private long position;
        private long remaining;

        FileRange(FileChannel channel, long position, long size) {
            this.channel = channel;
            this.position = position;
            this.remaining = size;
        }

        @Override
        public int read(byte[] buffer, int from, int length) throws IOException {
            if (remaining <= 0) {
                return -1;
            }
            int count = channel.read(ByteBuffer.wrap(buffer, from, (int) Math.min(length, remaining)), position);
            if (count < 0) {
                throw new IOException("the log ended " + remaining + " bytes early");
            }
            position += count;
            remaining -= count;
            return count;
        }
    }
}
