package dev.remotelog.kafka.storage;

import com.google.protobuf.ByteString;
import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.rpc.Failures;
import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.util.DaemonThreads;
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
import java.util.concurrent.atomic.AtomicReference;
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
import remotelog.api.segmentstore.v1.SegmentStore.SegmentDataChunk;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFile;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFilePath;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFileSize;
import remotelog.api.segmentstore.v1.SegmentStore.StartSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.StartSegmentUploadResponse;
import remotelog.api.segmentstore.v1.SegmentStore.UploadPart;
import remotelog.api.segmentstore.v1.SegmentStore.UploadedPart;
import remotelog.api.segmentstore.v1.SegmentStoreServiceGrpc.SegmentStoreServiceBlockingStub;

/**
 * Copies whose bytes skip the store's CopyLogSegmentData stream (copy.method): by path,
 * the store reading the broker's files itself; by URL, the broker PUTting the parts of
 * the multipart upload the store starts, in parallel, each streamed from the segment's
 * file while its MD5 is taken. The store checks the MD5s and sizes before it makes the
 * segment visible. URLs are never logged: errors name the part, not its URL.
 */
public final class DirectCopy {
    private static final Logger LOG = LoggerFactory.getLogger(DirectCopy.class);
    /** A store that did not do the method is asked again after this long. */
    private static final long UNSUPPORTED_PAUSE_NANOS = TimeUnit.MINUTES.toNanos(5);
    private static final int MAX_PUT_ATTEMPTS = 5;
    private static final long FIRST_BACKOFF_MS = 100;
    private static final long ABORT_TIMEOUT_MS = 5_000;

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
        StartSegmentUploadResponse upload =
                copyCall()
                        .startSegmentUpload(
                                StartSegmentUploadRequest.newBuilder()
                                        .setMetadata(Protos.metadata(metadata))
                                        .addAllFiles(sizes)
                                        .setCopyTimeoutMs(settings.copyTimeoutMs())
                                        .build());
        boolean completed = false;
        try {
            List<UploadedPart> parts = putLog(files.get(SegmentFile.SEGMENT_FILE_LOG), upload, deadline);
            byte[] indexes = indexes(upload, files, checkpoint);
            String indexesMd5 =
                    put("the indexes", upload.getIndexesUrl(), deadline, indexes.length,
                            () -> new java.io.ByteArrayInputStream(indexes));
            var response =
                    complete(
                            CompleteSegmentUploadRequest.newBuilder()
                                    .setMetadata(Protos.metadata(metadata))
                                    .setUploadId(upload.getUploadId())
                                    .addAllFiles(sizes)
                                    .addAllLogParts(parts)
                                    .setIndexesMd5(indexesMd5)
                                    .build());
            completed = true;
            return result(response.hasCustomMetadata(), response.getCustomMetadata());
        } finally {
            if (!completed) {
                abort(metadata, upload.getUploadId());
            }
        }
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

    /** The index files one after another, in the order the store gave. */
    private static byte[] indexes(
            StartSegmentUploadResponse upload, Map<SegmentFile, Path> files, byte[] checkpoint)
            throws IOException {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        for (SegmentFile file : upload.getIndexOrderList()) {
            if (file == SegmentFile.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT) {
                out.write(checkpoint);
            } else if (files.containsKey(file)) {
                out.write(Files.readAllBytes(files.get(file)));
            }
        }
        return out.toByteArray();
    }

    /** Every part of the log PUT, copy.url.parallel.parts of this segment at a time (the
     * broker's copies at once are Kafka's copier threads); what each was, for the store to
     * check. A part that finds no free slot before the copy's deadline fails the copy. */
    private List<UploadedPart> putLog(Path log, StartSegmentUploadResponse upload, long deadline)
            throws IOException, InterruptedException {
        List<CompletableFuture<UploadedPart>> puts = new ArrayList<>();
        try (FileChannel channel = FileChannel.open(log, StandardOpenOption.READ)) {
            ExecutorService threads = threads();
            Semaphore slots = new Semaphore(settings.copyParallelParts());
            for (UploadPart part : upload.getLogPartsList()) {
                if (!slots.tryAcquire(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                    throw new IOException(
                            "part " + part.getPartNumber() + " found no free PUT before the copy's timeout");
                }
                CompletableFuture<UploadedPart> put = new CompletableFuture<>();
                puts.add(put);
                threads.execute(
                        () -> {
                            try {
                                String md5 =
                                        put("part " + part.getPartNumber(), part.getUrl(), deadline,
                                                part.getSize(),
                                                () -> new FileRange(channel, part.getPosition(), part.getSize()));
                                put.complete(
                                        UploadedPart.newBuilder()
                                                .setPartNumber(part.getPartNumber())
                                                .setSize(part.getSize())
                                                .setMd5(md5)
                                                .build());
                            } catch (Throwable e) {
                                put.completeExceptionally(e);
                            } finally {
                                slots.release();
                            }
                        });
                failFast(puts);
            }
            List<UploadedPart> parts = new ArrayList<>();
            for (CompletableFuture<UploadedPart> put : puts) {
                parts.add(await(put, deadline));
            }
            return parts;
        } finally {
            for (CompletableFuture<UploadedPart> put : puts) {
                put.cancel(true);
            }
        }
    }

    private static void failFast(List<CompletableFuture<UploadedPart>> puts) throws IOException {
        for (CompletableFuture<UploadedPart> put : puts) {
            if (put.isCompletedExceptionally()) {
                await(put);
            }
        }
    }

    private static void await(CompletableFuture<UploadedPart> put) throws IOException {
        try {
            put.getNow(null);
        } catch (java.util.concurrent.CompletionException e) {
            throw asIo(e.getCause());
        }
    }

    private static UploadedPart await(CompletableFuture<UploadedPart> put, long deadline)
            throws IOException, InterruptedException {
        try {
            return put.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
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
     * One PUT of `size` bytes from `body` (opened again for each attempt), retried on a
     * 5xx, a 429 or a broken connection with backoff, within the deadline; the MD5 of the
     * bytes sent, once the object store's ETag shows it received exactly them.
     */
    private String put(String what, String url, long deadline, long size, Opener body)
            throws IOException, InterruptedException {
        IOException last = null;
        for (int attempt = 0; attempt < MAX_PUT_ATTEMPTS; attempt++) {
            if (attempt > 0) {
                long backoffMs = FIRST_BACKOFF_MS << Math.min(attempt - 1, 6);
                if (System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs) - deadline > 0) {
                    break;
                }
                Thread.sleep(backoffMs);
            }
            AtomicReference<MessageDigest> digest = new AtomicReference<>();
            HttpRequest request =
                    HttpRequest.newBuilder(URI.create(url))
                            .timeout(Duration.ofNanos(Math.max(1, deadline - System.nanoTime())))
                            .PUT(
                                    HttpRequest.BodyPublishers.fromPublisher(
                                            HttpRequest.BodyPublishers.ofInputStream(
                                                    () -> digesting(body, digest)),
                                            size))
                            .build();
            HttpResponse<String> response;
            try {
                response = client().send(request, HttpResponse.BodyHandlers.ofString());
            } catch (IOException e) {
                last = new IOException(what + ": " + e.getClass().getSimpleName(), e);
                continue;
            }
            int status = response.statusCode();
            if (status == 200) {
                String md5 = hex(digest.get().digest());
                String etag = response.headers().firstValue("ETag").orElse("").replace("\"", "");
                if (!etag.equalsIgnoreCase(md5)) {
                    last = new IOException(what + ": the object store received other bytes than sent");
                    continue;
                }
                return md5;
            }
            last = new IOException(what + ": HTTP " + status + " to its PUT");
            if (status != 429 && status < 500) {
                break; // refused (an expired or altered URL): another attempt would be too
            }
        }
        throw last;
    }

    interface Opener {
        InputStream open() throws IOException;
    }

    private static InputStream digesting(Opener body, AtomicReference<MessageDigest> digest) {
        try {
            MessageDigest md5 = MessageDigest.getInstance("MD5");
            digest.set(md5);
            return new DigestInputStream(body.open(), md5);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java has MD5", e);
        }
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
    private static final class FileRange extends InputStream {
        private final FileChannel channel;
        private long position;
        private long remaining;

        FileRange(FileChannel channel, long position, long size) {
            this.channel = channel;
            this.position = position;
            this.remaining = size;
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            return read(one, 0, 1) < 0 ? -1 : one[0] & 0xff;
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
