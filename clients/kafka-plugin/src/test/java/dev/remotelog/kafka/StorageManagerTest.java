package dev.remotelog.kafka;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import com.sun.net.httpserver.HttpServer;
import dev.remotelog.kafka.config.KafkaApi;
import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.config.SettingsTest;
import dev.remotelog.kafka.rpc.FailuresTest;
import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.rpc.ProtosTest;
import dev.remotelog.kafka.rpc.ServiceChannel;
import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import dev.remotelog.kafka.transforms.ChunkCodec;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataResponse;
import remotelog.api.metadata.v1.RemoteLogMetadataServiceGrpc;
import remotelog.api.segmentstore.v1.SegmentStore.AbortSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.IndexRange;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentChunks;
import remotelog.api.segmentstore.v1.SegmentStore.AbortSegmentUploadResponse;
import remotelog.api.segmentstore.v1.SegmentStore.CompleteSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.CompleteSegmentUploadResponse;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataRequest;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataResponse;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentFilesRequest;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentFilesResponse;
import remotelog.api.segmentstore.v1.SegmentStore.FetchIndexRequest;
import remotelog.api.segmentstore.v1.SegmentStore.FetchIndexResponse;
import remotelog.api.segmentstore.v1.SegmentStore.FetchLogSegmentRequest;
import remotelog.api.segmentstore.v1.SegmentStore.FetchLogSegmentResponse;
import remotelog.api.segmentstore.v1.SegmentStore.GetLogSegmentUrlRequest;
import remotelog.api.segmentstore.v1.SegmentStore.GetLogSegmentUrlResponse;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentDataChunk;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentFile;
import remotelog.api.segmentstore.v1.SegmentStore.StartSegmentUploadRequest;
import remotelog.api.segmentstore.v1.SegmentStore.StartSegmentUploadResponse;
import remotelog.api.segmentstore.v1.SegmentStore.UploadPart;
import remotelog.api.segmentstore.v1.SegmentStore.UploadedPart;
import remotelog.api.segmentstore.v1.SegmentStore;
import remotelog.api.segmentstore.v1.SegmentStoreServiceGrpc;

/** The storage manager against an in-process store that records what reaches it: the
 * wire behaviour Kafka depends on, which the end-to-end tests cannot isolate. */
public class StorageManagerTest {
    static final String BROKER = "storage-manager-test";
    static final int CHUNK = 4096;
    static final int PART = 5 << 20;
    static final int FETCH_CHUNKS = 1000;
    static final int READ_AHEAD_CHUNK = 64 << 10;

    final List<CopyLogSegmentDataRequest> copied = new ArrayList<>();
    // The copy breaks (UNAVAILABLE, as from a killed store) on this message; 0: never.
    int copyBreaksAt;
    // The store refuses the copy, as a path outside copy.paths.allowed; null: it takes it.
    volatile io.grpc.StatusRuntimeException copyRefusal;
    volatile io.grpc.StatusRuntimeException pathRefusal;
    // The store takes the copy but never answers, as a hung (SIGSTOPped) one.
    volatile boolean copyHangs;
    final CountDownLatch copyCancelled = new CountDownLatch(1);
    // GetLogSegmentUrl fails UNAVAILABLE, as from a store that is down.
    volatile boolean urlsUnavailable;
    long copyTimeoutMs = 10_000;
    long timeoutMs = 10_000;
    // copy.method, and whether the store does path and url copies (else UNIMPLEMENTED).
    String copyMethod = "stream";
    volatile boolean directCopies;
    final List<CopyLogSegmentFilesRequest> copiedByPath = new ArrayList<>();
    final AtomicInteger directAsked = new AtomicInteger();
    // A stand-in for S3 behind upload URLs: a PUT's body kept by path, its MD5 the ETag.
    HttpServer objects;
    final Map<String, byte[]> putObjects = new ConcurrentHashMap<>();
    final List<CompleteSegmentUploadRequest> completedUploads = new ArrayList<>();
    final List<StartSegmentUploadRequest> startedUploads = new ArrayList<>();
    // The headers each PUT sent, by path; a path here is answered 400 BadDigest, as S3
    // answers bytes other than the Content-MD5's.
    final Map<String, com.sun.net.httpserver.Headers> putHeaders = new ConcurrentHashMap<>();
    volatile String badDigestAt;
    final AtomicInteger abortedUploads = new AtomicInteger();
    // CompleteSegmentUpload answers INVALID_ARGUMENT with this, as for a part other than sent.
    volatile String uploadMismatch;
    // Chunks read ahead of an HTTP reader: none (the plain ranged GETs) unless a test says.
    int readAheadChunks;
    String nextSegmentAddress = "";
    // Where file:// URLs may point: where JUnit makes each test's directory, unless a test says.
    String fileRoots = System.getProperty("java.io.tmpdir");
    // Whether the thread was still interrupted as the last failed copy returned.
    boolean interruptKept;
    final AtomicInteger fetchChunksSent = new AtomicInteger();
    final CountDownLatch fetchCancelled = new CountDownLatch(1);
    final AtomicInteger urlsAsked = new AtomicInteger();
    final AtomicInteger fetchCalls = new AtomicInteger();
    final List<FetchLogSegmentRequest> fetchesAsked = new java.util.concurrent.CopyOnWriteArrayList<>();
    // Segments (their ids as the request carries them) GetLogSegmentUrl has no URL for.
    final java.util.Set<com.google.protobuf.ByteString> chunkedSegments =
            java.util.concurrent.ConcurrentHashMap.newKeySet();
    // What GetLogSegmentUrl answers, one per call (the last again); none: UNIMPLEMENTED.
    final List<String> urlsToGive = new ArrayList<>();
    // Merged into each answer: where the indexes are.
    GetLogSegmentUrlResponse indexesToGive = GetLogSegmentUrlResponse.getDefaultInstance();
    final AtomicInteger indexCalls = new AtomicInteger();
    String serverName;
    Server server;
    ManagedChannel channel;
    RemotelogStorageManager manager;

    class Store extends SegmentStoreServiceGrpc.SegmentStoreServiceImplBase {
        @Override
        public StreamObserver<CopyLogSegmentDataRequest> copyLogSegmentData(
                StreamObserver<CopyLogSegmentDataResponse> response) {
            ((ServerCallStreamObserver<CopyLogSegmentDataResponse>) response)
                    .setOnCancelHandler(copyCancelled::countDown);
            return new StreamObserver<>() {
                @Override
                public void onNext(CopyLogSegmentDataRequest request) {
                    synchronized (copied) {
                        copied.add(request);
                        if (copied.size() == copyBreaksAt) {
                            response.onError(Status.UNAVAILABLE.withDescription("killed").asRuntimeException());
                        }
                    }
                }

                @Override
                public void onError(Throwable t) {}

                @Override
                public void onCompleted() {
                    if (copyHangs) {
                        return;
                    }
                    if (copyRefusal != null) {
                        response.onError(copyRefusal);
                        return;
                    }
                    response.onNext(
                            CopyLogSegmentDataResponse.newBuilder()
                                    .setCustomMetadata(ByteString.copyFromUtf8("m"))
                                    .build());
                    response.onCompleted();
                }
            };
        }

        @Override
        public void copyLogSegmentFiles(
                CopyLogSegmentFilesRequest request, StreamObserver<CopyLogSegmentFilesResponse> response) {
            directAsked.incrementAndGet();
            if (!directCopies) {
                response.onError(Status.UNIMPLEMENTED.withDescription("no paths").asRuntimeException());
                return;
            }
            if (pathRefusal != null) {
                response.onError(pathRefusal);
                return;
            }
            copiedByPath.add(request);
            response.onNext(
                    CopyLogSegmentFilesResponse.newBuilder().setCustomMetadata(ByteString.copyFromUtf8("p")).build());
            response.onCompleted();
        }

        @Override
        public void startSegmentUpload(
                StartSegmentUploadRequest request, StreamObserver<StartSegmentUploadResponse> response) {
            directAsked.incrementAndGet();
            if (objects == null) {
                response.onError(Status.UNIMPLEMENTED.withDescription("no upload URLs").asRuntimeException());
                return;
            }
            startedUploads.add(request);
            String base = "http://127.0.0.1:" + objects.getAddress().getPort();
            var upload = StartSegmentUploadResponse.newBuilder().setUploadId("u1").setValidForMs(60_000);
            long position = 0;
            for (UploadedPart part : request.getLogPartsList()) {
                upload.addLogParts(
                        UploadPart.newBuilder()
                                .setPartNumber(part.getPartNumber())
                                .setPosition(position)
                                .setSize(part.getSize())
                                .setUrl(base + "/log/" + part.getPartNumber()));
                position += part.getSize();
            }
            response.onNext(
                    upload.setIndexesUrl(base + "/indexes")
                            .putIndexesHeaders("x-amz-server-side-encryption", "aws:kms")
                            .addIndexOrder(SegmentFile.SEGMENT_FILE_OFFSET_INDEX)
                            .addIndexOrder(SegmentFile.SEGMENT_FILE_TIME_INDEX)
                            .addIndexOrder(SegmentFile.SEGMENT_FILE_PRODUCER_SNAPSHOT)
                            .addIndexOrder(SegmentFile.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT)
                            .build());
            response.onCompleted();
        }

        @Override
        public void completeSegmentUpload(
                CompleteSegmentUploadRequest request, StreamObserver<CompleteSegmentUploadResponse> response) {
            completedUploads.add(request);
            if (uploadMismatch != null) {
                response.onError(Status.INVALID_ARGUMENT.withDescription(uploadMismatch).asRuntimeException());
                return;
            }
            response.onNext(
                    CompleteSegmentUploadResponse.newBuilder().setCustomMetadata(ByteString.copyFromUtf8("u")).build());
            response.onCompleted();
        }

        @Override
        public void abortSegmentUpload(
                AbortSegmentUploadRequest request, StreamObserver<AbortSegmentUploadResponse> response) {
            abortedUploads.incrementAndGet();
            response.onNext(AbortSegmentUploadResponse.getDefaultInstance());
            response.onCompleted();
        }

        @Override
        public void fetchLogSegment(
                FetchLogSegmentRequest request, StreamObserver<FetchLogSegmentResponse> response) {
            fetchCalls.incrementAndGet();
            fetchesAsked.add(request);
            var calls = (ServerCallStreamObserver<FetchLogSegmentResponse>) response;
            calls.setOnCancelHandler(fetchCancelled::countDown);
            // A whole segment's worth, sent as the client takes it (flow control).
            calls.setOnReadyHandler(
                    () -> {
                        while (calls.isReady() && !calls.isCancelled() && fetchChunksSent.get() < FETCH_CHUNKS) {
                            byte[] data = new byte[CHUNK];
                            data[0] = (byte) fetchChunksSent.getAndIncrement();
                            calls.onNext(FetchLogSegmentResponse.newBuilder().setData(ByteString.copyFrom(data)).build());
                        }
                        if (fetchChunksSent.get() == FETCH_CHUNKS && !calls.isCancelled()) {
                            fetchChunksSent.incrementAndGet();
                            calls.onCompleted();
                        }
                    });
        }

        @Override
        public void getLogSegmentUrl(
                GetLogSegmentUrlRequest request, StreamObserver<GetLogSegmentUrlResponse> response) {
            int asked = urlsAsked.getAndIncrement();
            if (urlsUnavailable) {
                response.onError(Status.UNAVAILABLE.withDescription("down").asRuntimeException());
                return;
            }
            if (urlsToGive.isEmpty()) {
                response.onError(Status.UNIMPLEMENTED.withDescription("no URLs").asRuntimeException());
                return;
            }
            if (chunkedSegments.contains(request.getRemoteLogSegmentMetadata().getRemoteLogSegmentId().getId())) {
                // A segment stored as chunks: UNSUPPORTED_OPERATION of this segment only.
                response.onError(FailuresTest.remotelog(
                        com.google.rpc.Code.UNIMPLEMENTED, "UNSUPPORTED_OPERATION", Map.of("scope", "segment")));
                return;
            }
            String url = urlsToGive.get(Math.min(asked, urlsToGive.size() - 1));
            response.onNext(
                    indexesToGive.toBuilder().setUrl(url).setValidForMs(600_000).build());
            response.onCompleted();
        }

        @Override
        public void fetchIndex(FetchIndexRequest request, StreamObserver<FetchIndexResponse> response) {
            indexCalls.incrementAndGet();
            response.onError(Status.NOT_FOUND.withDescription("no transaction index").asRuntimeException());
        }
    }

    @BeforeEach
    void start() throws Exception {
        serverName = InProcessServerBuilder.generateName();
        String name = serverName;
        server = InProcessServerBuilder.forName(name).addService(new Store()).build().start();
        manager = new RemotelogStorageManager();
        connect(name);
    }

    /** The manager calls the store through a new channel, as after a configure(). */
    void connect(String name) {
        channel = InProcessChannelBuilder.forName(name).build();
        Settings settings =
                SettingsTest.inProcess(
                        Settings.Role.STORAGE,
                        Settings.TIMEOUT, timeoutMs,
                        Settings.COPY_TIMEOUT, copyTimeoutMs,
                        Settings.CHUNK_BYTES, CHUNK,
                        Settings.COPY_METHOD, copyMethod,
                        Settings.COPY_PART_BYTES, PART,
                        Settings.FETCH_URLS, true,
                        Settings.FETCH_FILE_URL_ROOTS, fileRoots,
                        Settings.READ_AHEAD_CHUNKS, readAheadChunks,
                        Settings.READ_AHEAD_CHUNK_BYTES, READ_AHEAD_CHUNK,
                        Settings.NEXT_SEGMENT_ADDRESS, nextSegmentAddress,
                        "broker.id", BROKER);
        manager.use(new ServiceChannel(settings, channel));
    }

    @AfterEach
    void stop() {
        manager.close();
        server.shutdownNow();
        if (objects != null) {
            objects.stop(0);
        }
    }

    static RemoteLogSegmentMetadata segment() {
        return ProtosTest.segment(RemoteLogSegmentState.COPY_SEGMENT_STARTED, Optional.empty());
    }

    /** A segment's files: a log of two chunks and a bit (the chunk at CHUNK begins 42). */
    static LogSegmentData segmentData(Path dir) throws Exception {
        byte[] log = new byte[CHUNK * 2 + 100];
        log[CHUNK] = 42;
        Path logFile = Files.write(dir.resolve("0.log"), log);
        Path offsets = Files.write(dir.resolve("0.index"), new byte[] {1, 2});
        Path times = Files.write(dir.resolve("0.timeindex"), new byte[0]);
        Path snapshot = Files.write(dir.resolve("0.snapshot"), new byte[] {3});
        ByteBuffer epochs = ByteBuffer.wrap("0\n1\n0 0\n".getBytes());
        return new LogSegmentData(logFile, offsets, times, Optional.empty(), snapshot, epochs);
    }

    @Test
    void aCopyCutOffFailsForGoodSoKafkaCleansItUp(@TempDir Path dir) throws Exception {
        copyBreaksAt = 3; // the metadata and a chunk of the log reached the store
        var failure =
                assertThrows(
                        org.apache.kafka.server.log.remote.storage.RemoteStorageException.class,
                        () -> manager.copyLogSegmentData(segment(), segmentData(dir)));
        assertFalse(KafkaApi.isRetriable(failure), failure.toString());
        assertTrue(failure.getMessage().contains("(UNAVAILABLE)"), failure.getMessage());
    }

    /** The copy's failure, after checking it fails for good and its stream was cancelled. */
    RemoteStorageException failedCopy(LogSegmentData data) throws Exception {
        RemoteStorageException failure =
                assertThrows(RemoteStorageException.class, () -> manager.copyLogSegmentData(segment(), data));
        interruptKept = Thread.interrupted();
        assertFalse(KafkaApi.isRetriable(failure), failure.toString());
        assertTrue(failure.getMessage().endsWith("Kafka deletes the attempt and copies again"), failure.getMessage());
        assertTrue(copyCancelled.await(10, TimeUnit.SECONDS), "the copy's stream is still open");
        return failure;
    }

    @Test
    void aCopyTheStoreNeverAnswersFailsForGoodAtItsDeadline(@TempDir Path dir) throws Exception {
        copyHangs = true;
        copyTimeoutMs = 1_000;
        connect(serverName);
        RemoteStorageException failure = failedCopy(segmentData(dir));
        assertTrue(failure.getMessage().contains("(DEADLINE_EXCEEDED)"), failure.getMessage());
    }

    @Test
    void anInterruptedCopyFailsForGoodAndKeepsTheInterrupt(@TempDir Path dir) throws Exception {
        copyHangs = true;
        LogSegmentData data = segmentData(dir);
        Thread.currentThread().interrupt(); // as Kafka cancels a copy task
        RemoteStorageException failure = failedCopy(data);
        assertTrue(interruptKept, "the interrupt was swallowed");
        assertTrue(failure.getMessage().contains("was interrupted"), failure.getMessage());
    }

    @Test
    void aCopyWhoseFilesCannotBeReadFailsForGood(@TempDir Path dir) throws Exception {
        LogSegmentData data = segmentData(dir);
        Files.delete(data.timeIndex()); // the log and offset index went out first
        RemoteStorageException failure = failedCopy(data);
        assertTrue(
                failure.getMessage().contains("could not read or send the segment's files"), failure.getMessage());
        assertTrue(copied.size() >= 3, "sent " + copied.size());
    }

    @Test
    void aCopyTheStoreRefusesIsARemoteStorageExceptionSoKafkaDeletesTheAttempt(@TempDir Path dir)
            throws Exception {
        // Anything unchecked would leave Kafka's attempt COPY_SEGMENT_STARTED, and the copy
        // task would add another at each run.
        for (com.google.rpc.Code code : List.of(com.google.rpc.Code.INVALID_ARGUMENT, com.google.rpc.Code.FAILED_PRECONDITION)) {
            copyRefusal = FailuresTest.remotelog(code, code.name());
            RemoteStorageException failure =
                    assertThrows(RemoteStorageException.class, () -> manager.copyLogSegmentData(segment(), segmentData(dir)));
            assertFalse(KafkaApi.isRetriable(failure), failure.toString());
            assertTrue(failure.getMessage().contains("was refused (" + code + " " + code + ")"), failure.getMessage());
            assertTrue(failure.getMessage().endsWith("Kafka deletes the attempt and copies again"), failure.getMessage());
        }
    }

    @Test
    void aPathCopyOfFilesTheStoreCannotReadTakesTheStreamAndTheNextAsksAgain(@TempDir Path dir)
            throws Exception {
        copyMethod = "path";
        directCopies = true;
        connect(serverName);
        pathRefusal =
                FailuresTest.remotelog(
                        com.google.rpc.Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", Map.of("field", "files.path"));
        for (int copy = 1; copy <= 2; copy++) {
            copied.clear();
            var custom = manager.copyLogSegmentData(segment(), segmentData(dir));
            assertEquals("m", new String(custom.orElseThrow().value(), StandardCharsets.UTF_8));
            assertTrue(copied.size() >= 3, "sent " + copied.size());
            assertEquals(copy, directAsked.get()); // not paused: another file may be readable
        }
        // Other bad input is the copy's own: it fails, and is not sent again by the stream.
        pathRefusal =
                FailuresTest.remotelog(
                        com.google.rpc.Code.INVALID_ARGUMENT, "INVALID_ARGUMENT", Map.of("field", "inline_files"));
        copied.clear();
        RemoteStorageException failure =
                assertThrows(RemoteStorageException.class, () -> manager.copyLogSegmentData(segment(), segmentData(dir)));
        assertTrue(failure.getMessage().contains("was refused (INVALID_ARGUMENT"), failure.getMessage());
        assertEquals(List.of(), copied);
    }

    @Test
    void aCopyByPathSendsEveryFilesPathAndSizeAndTheCheckpointInline(@TempDir Path dir) throws Exception {
        copyMethod = "path";
        directCopies = true;
        connect(serverName);
        LogSegmentData data = segmentData(dir);
        var custom = manager.copyLogSegmentData(segment(), data);
        assertEquals("p", new String(custom.orElseThrow().value(), StandardCharsets.UTF_8));
        assertEquals(List.of(), copied); // nothing went by the stream
        CopyLogSegmentFilesRequest request = copiedByPath.get(0);
        assertEquals(
                List.of(
                        data.logSegment().toAbsolutePath() + " " + (CHUNK * 2 + 100),
                        data.offsetIndex().toAbsolutePath() + " 2",
                        data.timeIndex().toAbsolutePath() + " 0",
                        data.producerSnapshotIndex().toAbsolutePath() + " 1"),
                request.getFilesList().stream().map(f -> f.getPath() + " " + f.getSize()).collect(Collectors.toList()));
        assertEquals(SegmentFile.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT, request.getInlineFiles(0).getFile());
        assertEquals("0\n1\n0 0\n", request.getInlineFiles(0).getData().toStringUtf8());
        // Every file counts, as in a stream copy: the log, indexes, snapshot, checkpoint.
        assertEquals(CHUNK * 2 + 100 + 2 + 0 + 1 + 8, Jmx.read(Jmx.STORAGE, "copy-bytes-total"));
    }

    // Each PUT, once its body is in, waits for this many to be in flight together (5 s
    // at most); null: none waits.
    volatile CountDownLatch putsTogether;
    final AtomicInteger putsInFlight = new AtomicInteger();
    // What a PUT taken answers: S3 and GCS 200, Azure 201.
    volatile int putStatus = 200;
    final AtomicInteger mostPutsInFlight = new AtomicInteger();

    /** The stand-in for S3 started, and the manager copying by URL. */
    void objectStore() throws Exception {
        objects = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        objects.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
        objects.createContext(
                "/",
                exchange -> {
                    byte[] body = exchange.getRequestBody().readAllBytes();
                    mostPutsInFlight.accumulateAndGet(putsInFlight.incrementAndGet(), Math::max);
                    CountDownLatch together = putsTogether;
                    if (together != null) {
                        together.countDown();
                        awaitAtMost(together, 5);
                    }
                    putsInFlight.decrementAndGet();
                    String path = exchange.getRequestURI().getPath();
                    putHeaders.put(path, exchange.getRequestHeaders());
                    String stated = exchange.getRequestHeaders().getFirst("Content-MD5");
                    if (path.equals(badDigestAt)
                            || !java.util.Base64.getEncoder().encodeToString(md5Bytes(body)).equals(stated)) {
                        byte[] error = "<Error><Code>BadDigest</Code></Error>".getBytes(StandardCharsets.UTF_8);
                        exchange.sendResponseHeaders(400, error.length);
                        exchange.getResponseBody().write(error);
                        exchange.close();
                        return;
                    }
                    putObjects.put(path, body);
                    // An SSE-KMS bucket's ETag: no MD5 of the bytes.
                    exchange.getResponseHeaders().add("ETag", "\"" + md5(("kms" + md5(body)).getBytes()) + "\"");
                    exchange.sendResponseHeaders(putStatus, -1);
                    exchange.close();
                });
        objects.start();
        copyMethod = "url";
        connect(serverName);
    }

    /** Waits for `latch` for `seconds` at most, keeping an interrupt (a server's thread). */
    static void awaitAtMost(CountDownLatch latch, long seconds) {
        try {
            latch.await(seconds, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** A segment whose log is three parts of copy.url.part.bytes (5 MiB here), the last short. */
    static LogSegmentData urlSegmentData(Path dir) throws Exception {
        LogSegmentData data = segmentData(dir);
        byte[] log = new byte[2 * PART + 100];
        new java.util.Random(7).nextBytes(log);
        Files.write(data.logSegment(), log);
        return data;
    }

    static String md5(byte[] bytes) {
        return String.format("%032x", new java.math.BigInteger(1, md5Bytes(bytes)));
    }

    static byte[] md5Bytes(byte[] bytes) {
        try {
            return java.security.MessageDigest.getInstance("MD5").digest(bytes);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void aCopyByUrlPutsEveryPartAndTheIndexesAndTellsTheStoreWhatItSent(@TempDir Path dir) throws Exception {
        objectStore();
        LogSegmentData data = urlSegmentData(dir);
        var custom = manager.copyLogSegmentData(segment(), data);
        assertEquals("u", new String(custom.orElseThrow().value(), StandardCharsets.UTF_8));
        assertEquals(List.of(), copied); // nothing went by the stream
        byte[] log = Files.readAllBytes(data.logSegment());
        assertEquals(java.util.Set.of("/log/1", "/log/2", "/log/3", "/indexes"), putObjects.keySet());
        ByteArrayOutputStream parts = new ByteArrayOutputStream();
        for (int number = 1; number <= 3; number++) {
            parts.write(putObjects.get("/log/" + number));
        }
        assertArrayEquals(log, parts.toByteArray());
        assertArrayEquals(new byte[] {1, 2, 3, '0', '\n', '1', '\n', '0', ' ', '0', '\n'}, putObjects.get("/indexes"));
        // Every MD5 was stated before any PUT, for the store to sign; each PUT sent its own
        // (the object server refuses another), and the indexes' the headers its URL signs.
        StartSegmentUploadRequest started = startedUploads.get(0);
        assertEquals(
                List.of(1, 2, 3),
                started.getLogPartsList().stream().map(UploadedPart::getPartNumber).collect(Collectors.toList()));
        assertEquals(
                List.of((long) PART, (long) PART, 100L),
                started.getLogPartsList().stream().map(UploadedPart::getSize).collect(Collectors.toList()));
        for (UploadedPart part : started.getLogPartsList()) {
            assertEquals(md5(putObjects.get("/log/" + part.getPartNumber())), part.getMd5());
        }
        assertEquals(md5(putObjects.get("/indexes")), started.getIndexesMd5());
        assertEquals("aws:kms", putHeaders.get("/indexes").getFirst("x-amz-server-side-encryption"));
        assertNull(putHeaders.get("/log/1").getFirst("x-amz-server-side-encryption"));
        CompleteSegmentUploadRequest sent = completedUploads.get(0);
        assertEquals("u1", sent.getUploadId());
        assertEquals(started.getLogPartsList(), sent.getLogPartsList());
        assertEquals(0, abortedUploads.get());
    }

    @Test
    void aCopyByUrlToAnObjectStoreThatAnswers201IsDone(@TempDir Path dir) throws Exception {
        putStatus = 201; // Azure's Put Block and Put Blob
        objectStore();
        LogSegmentData data = urlSegmentData(dir);
        assertTrue(manager.copyLogSegmentData(segment(), data).isPresent());
        assertEquals(java.util.Set.of("/log/1", "/log/2", "/log/3", "/indexes"), putObjects.keySet());
        assertEquals(1, completedUploads.size());
        assertEquals(0, abortedUploads.get());
    }

    @Test
    void copyUrlParallelPartsBoundsEachSegmentsPutsNotTheBrokers(@TempDir Path dir) throws Exception {
        objectStore();
        putsTogether = new CountDownLatch(6); // two segments' three parts each
        Path first = Files.createDirectory(dir.resolve("first"));
        Path second = Files.createDirectory(dir.resolve("second"));
        var other = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
            try {
                return manager.copyLogSegmentData(segment(), urlSegmentData(second));
            } catch (Exception e) {
                throw new java.util.concurrent.CompletionException(e);
            }
        });
        manager.copyLogSegmentData(segment(), urlSegmentData(first));
        other.get(30, TimeUnit.SECONDS);
        // Four at a time a segment: both segments' parts were PUT at once.
        assertEquals(6, mostPutsInFlight.get());
    }

    @Test
    void anUploadTheStoreFindsOtherThanSentFailsForGoodAndIsAborted(@TempDir Path dir) throws Exception {
        objectStore();
        uploadMismatch = "part 2 was sent as 4096 bytes, but S3 holds nothing";
        RemoteStorageException failure =
                assertThrows(RemoteStorageException.class, () -> manager.copyLogSegmentData(segment(), urlSegmentData(dir)));
        // A RemoteStorageException, so Kafka deletes the attempt and copies again.
        assertFalse(KafkaApi.isRetriable(failure), failure.toString());
        assertTrue(failure.getCause().getMessage().contains("other bytes than sent"), failure.toString());
        assertEquals(1, abortedUploads.get());
    }

    @Test
    void aPartTheObjectStoreFindsOtherThanItsMd5FailsTheCopyForGoodUnasked(@TempDir Path dir) throws Exception {
        objectStore();
        badDigestAt = "/log/2"; // the file changed between its MD5 and its PUT
        RemoteStorageException failure =
                assertThrows(RemoteStorageException.class, () -> manager.copyLogSegmentData(segment(), urlSegmentData(dir)));
        assertFalse(KafkaApi.isRetriable(failure), failure.toString());
        assertTrue(failure.getCause().getMessage().contains("part 2: HTTP 400 to its PUT (BadDigest)"), failure.toString());
        assertEquals(List.of(), completedUploads);
        assertEquals(1, abortedUploads.get());
    }

    @Test
    void aCopyByUrlOrPathToAStoreThatDoesNotDoItTakesTheStream(@TempDir Path dir) throws Exception {
        for (String method : List.of("url", "path")) {
            copyMethod = method;
            connect(serverName);
            directAsked.set(0);
            copied.clear();
            var custom = manager.copyLogSegmentData(segment(), segmentData(dir));
            assertEquals("m", new String(custom.orElseThrow().value(), StandardCharsets.UTF_8));
            assertEquals(1, directAsked.get(), method);
            assertTrue(copied.size() >= 3, "sent " + copied.size());
            // Paused: the next copy takes the stream without asking.
            copied.clear();
            manager.copyLogSegmentData(segment(), segmentData(dir));
            assertEquals(1, directAsked.get(), method);
            assertTrue(copied.size() >= 3, "sent " + copied.size());
        }
    }

    @Test
    void aSecondConfigureClosesTheFirstChannel() {
        ManagedChannel first = channel;
        connect(serverName);
        assertTrue(first.isShutdown());
        assertFalse(channel.isShutdown());
    }

    /** Kafka's own Plugin.wrapInstance (4.1+), as a broker wraps the configured plugin. */
    static AutoCloseable wrappedByKafka(Object plugin, Metrics broker, String config) throws Exception {
        Class<?> wrapper;
        try {
            wrapper = Class.forName("org.apache.kafka.common.internals.Plugin");
        } catch (ClassNotFoundException e) {
            Assumptions.abort("Kafka " + KafkaApi.brokerVersion() + " hands plugins no metrics registry");
            throw e;
        }
        return (AutoCloseable)
                wrapper.getMethod("wrapInstance", Object.class, Metrics.class, String.class)
                        .invoke(null, plugin, broker, config);
    }

    /** The broker's metric `name` of the plugin, tagged as Kafka tags it, with `tags` of ours. */
    static Optional<Object> brokerMetric(Metrics broker, String name, String... tags) {
        Map<String, String> wanted = new HashMap<>();
        for (int i = 0; i < tags.length; i += 2) {
            wanted.put(tags[i], tags[i + 1]);
        }
        return broker.metrics().entrySet().stream()
                .filter(e -> e.getKey().group().equals("plugins") && e.getKey().name().equals(name))
                .filter(e -> e.getKey().tags().entrySet().containsAll(wanted.entrySet()))
                .map(e -> e.getValue().metricValue())
                .findFirst();
    }

    @Test
    void aKafka41BrokersRegistryMirrorsEveryMetricUntilThePluginCloses(@TempDir Path dir) throws Exception {
        String config = "remote.log.storage.manager.class.name";
        try (Metrics broker = new Metrics()) {
            AutoCloseable plugin = wrappedByKafka(manager, broker, config);
            String[] kafkaTags = {"config", config, "class", "RemotelogStorageManager"};
            // Registered now, so mirrored at once; a method's calls only once it is first called.
            assertEquals(Optional.of(0.0), brokerMetric(broker, "copy-bytes-total", kafkaTags));
            assertEquals(Optional.of(0), brokerMetric(broker, "copies-in-flight", kafkaTags));
            assertEquals(Optional.empty(), brokerMetric(broker, "calls-total", "method", "CopyLogSegmentData"));

            manager.copyLogSegmentData(segment(), segmentData(dir));
            // Counted as the call closes, which may come after the caller returns.
            Optional<Object> calls = Optional.empty();
            for (int i = 0; i < 1000 && !calls.equals(Optional.of(1.0)); i++) {
                Thread.sleep(10);
                calls = brokerMetric(broker, "calls-total", "config", config, "method", "CopyLogSegmentData");
            }
            assertEquals(Optional.of(1.0), calls);
            assertEquals(
                    Optional.of(Jmx.read(Jmx.STORAGE, "copy-bytes-total")),
                    brokerMetric(broker, "copy-bytes-total", kafkaTags));

            connect(serverName); // a second configure(): its new metrics are mirrored instead
            assertEquals(Optional.of(0.0), brokerMetric(broker, "copy-bytes-total", kafkaTags));
            assertEquals(Optional.empty(), brokerMetric(broker, "calls-total", "method", "CopyLogSegmentData"));

            plugin.close(); // the broker closes the plugin, then its registry
            assertEquals(Optional.empty(), brokerMetric(broker, "copy-bytes-total"));
        }
    }

    @Test
    void callsBytesAndReadsAreMetricsInJmx(@TempDir Path dir) throws Exception {
        LogSegmentData data = segmentData(dir);
        manager.copyLogSegmentData(segment(), data);
        try (InputStream stream = manager.fetchLogSegment(segment(), 0)) {
            stream.readNBytes(CHUNK * 3);
        }
        assertThrows(RemoteResourceNotFoundException.class, () -> manager.fetchIndex(segment(), IndexType.TRANSACTION));

        String copy = Jmx.STORAGE + ",method=CopyLogSegmentData";
        assertEquals(1, Jmx.await(copy, "calls-total", 1));
        assertTrue(Jmx.read(copy, "latency-max") > 0);
        long sent = 0;
        for (CopyLogSegmentDataRequest request : copied) {
            sent += request.getChunk().getData().size();
        }
        assertEquals(sent, Jmx.read(Jmx.STORAGE, "copy-bytes-total"));
        assertEquals(0, Jmx.read(Jmx.STORAGE, "copies-in-flight"));
        // The broker closed the stream after three chunks: what it read, not what was sent.
        assertEquals(CHUNK * 3, Jmx.read(Jmx.STORAGE, "fetch-bytes-total"));
        // URLs are on, and this store hands out none: the log was read by stream.
        assertEquals(1, Jmx.read(Jmx.STORAGE, "log-reads-by-stream-total"));
        assertEquals(0, Jmx.read(Jmx.STORAGE, "log-reads-by-url-total"));
        assertEquals(1, Jmx.read(Jmx.STORAGE + ",method=FetchIndex,code=NOT_FOUND", "errors-total"));
        // A stream the broker cancelled is no failure.
        assertEquals(1, Jmx.await(Jmx.STORAGE + ",method=FetchLogSegment", "calls-total", 1));
        assertThrows(
                javax.management.InstanceNotFoundException.class,
                () -> Jmx.read(Jmx.STORAGE + ",method=FetchLogSegment,code=CANCELLED", "errors-total"));

        manager.close(); // its MBeans go with it
        assertThrows(javax.management.InstanceNotFoundException.class, () -> Jmx.read(copy, "calls-total"));
    }

    @Test
    void aCopySendsTheMetadataThenEveryFileInOrderWithPositions(@TempDir Path dir) throws Exception {
        LogSegmentData data = segmentData(dir);
        Optional<CustomMetadata> custom = manager.copyLogSegmentData(segment(), data);

        assertArrayEquals("m".getBytes(), custom.orElseThrow().value());
        assertTrue(copied.get(0).hasMetadata());
        List<String> chunks = new ArrayList<>();
        ByteArrayOutputStream logBytes = new ByteArrayOutputStream();
        for (CopyLogSegmentDataRequest request : copied.subList(1, copied.size())) {
            SegmentDataChunk chunk = request.getChunk();
            chunks.add(chunk.getFile() + "@" + chunk.getPosition() + "+" + chunk.getData().size());
            if (chunk.getFile() == SegmentFile.SEGMENT_FILE_LOG) {
                chunk.getData().writeTo(logBytes);
            }
        }
        assertEquals(
                List.of(
                        "SEGMENT_FILE_LOG@0+4096",
                        "SEGMENT_FILE_LOG@4096+4096",
                        "SEGMENT_FILE_LOG@8192+100",
                        "SEGMENT_FILE_OFFSET_INDEX@0+2",
                        "SEGMENT_FILE_TIME_INDEX@0+0", // an empty file is still sent, empty
                        "SEGMENT_FILE_PRODUCER_SNAPSHOT@0+1",
                        "SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT@0+8"),
                chunks);
        assertArrayEquals(Files.readAllBytes(dir.resolve("0.log")), logBytes.toByteArray());
        assertEquals(0, data.leaderEpochIndex().position()); // the broker's buffer is left as it was
    }

    @Test
    void closingAFetchStreamCancelsTheCallBeforeTheSegmentIsPulled() throws Exception {
        byte[] first = new byte[CHUNK * 3];
        try (InputStream stream = manager.fetchLogSegment(segment(), 0)) {
            int read = stream.readNBytes(first, 0, first.length);
            assertEquals(first.length, read);
        }
        assertTrue(fetchCancelled.await(10, TimeUnit.SECONDS), "the store saw no cancellation");
        assertEquals(1, first[CHUNK]);
        assertTrue(fetchChunksSent.get() < FETCH_CHUNKS, "sent " + fetchChunksSent.get());
    }

    @Test
    void aWholeFetchReadsToTheEnd() throws Exception {
        try (InputStream stream = manager.fetchLogSegment(segment(), 0, CHUNK * FETCH_CHUNKS - 1)) {
            assertEquals((long) CHUNK * FETCH_CHUNKS, stream.transferTo(OutputStream.nullOutputStream()));
        }
    }

    @Test
    void aMissingIndexIsThrownByFetchIndexItself() {
        RemoteResourceNotFoundException missing =
                assertThrows(
                        RemoteResourceNotFoundException.class,
                        () -> manager.fetchIndex(segment(), IndexType.TRANSACTION));
        assertTrue(missing.getMessage().contains("no transaction index"), missing.getMessage());
    }

    static byte[] readAll(InputStream stream) throws Exception {
        try (stream) {
            return stream.readAllBytes();
        }
    }

    @Test
    void aFileUrlIsReadWithoutTheStreamAndKeptForTheNextReads(@TempDir Path dir) throws Exception {
        byte[] log = new byte[100_000];
        new java.util.Random(7).nextBytes(log);
        Path file = Files.write(dir.resolve("0.log"), log);
        urlsToGive.add(file.toUri().toString());
        RemoteLogSegmentMetadata segment = segment();
        assertArrayEquals(log, readAll(manager.fetchLogSegment(segment, 0)));
        assertArrayEquals(
                java.util.Arrays.copyOfRange(log, 777, 70_001),
                readAll(manager.fetchLogSegment(segment, 777, 70_000)));
        assertEquals(0, fetchChunksSent.get());
        assertEquals(1, urlsAsked.get());
    }

    @Test
    void aFileUrlOutsideTheRootsOrLinkedOutOfThemIsNotOpened(@TempDir Path dir) throws Exception {
        Path root = Files.createDirectory(dir.resolve("segments"));
        fileRoots = root.toString();
        Path outside = Files.write(dir.resolve("0.log"), new byte[] {7});
        Path link = Files.createSymbolicLink(root.resolve("1.log"), outside);
        urlsToGive.add(outside.toUri().toString());
        urlsToGive.add(link.toUri().toString());
        urlsToGive.add(root.resolve("../0.log").toUri().toString());
        for (int read = 1; read <= 3; read++) {
            connect(serverName); // a reader whose URL reads have not paused after a failure
            // Through the stream (its chunks marked by their count), not the file's byte 7.
            try (InputStream stream = manager.fetchLogSegment(segment(), 0, 0)) {
                assertNotEquals(7, stream.read());
            }
            assertEquals(read, fetchCalls.get());
        }
        assertEquals(3, urlsAsked.get());
    }

    @Test
    void aSegmentWithoutAUrlIsStreamedAndTheOthersStillGoByTheirs(@TempDir Path dir) throws Exception {
        byte[] log = new byte[10_000];
        new java.util.Random(11).nextBytes(log);
        urlsToGive.add(Files.write(dir.resolve("0.log"), log).toUri().toString());
        fileRoots = dir.toString();
        connect(serverName);
        RemoteLogSegmentMetadata chunked = segment();
        chunkedSegments.add(Protos.metadata(chunked).getRemoteLogSegmentId().getId());
        for (int read = 1; read <= 2; read++) {
            try (InputStream stream = manager.fetchLogSegment(chunked, 0)) {
                assertTrue(stream.read() >= 0);
            }
            assertEquals(read, fetchCalls.get()); // through the stream
        }
        assertEquals(1, urlsAsked.get()); // asked once for it, then remembered
        assertArrayEquals(log, readAll(manager.fetchLogSegment(segment(), 0)));
        assertEquals(2, fetchCalls.get()); // the plain segment by its URL
        assertEquals(2, urlsAsked.get());
    }

    /** `original` encoded as chunks of `chunkSize` under `key`, as the store writes them:
     * the stored bytes, and each stored chunk's size. */
    static Map.Entry<byte[], List<Long>> chunked(
            RemoteLogSegmentMetadata segment, ChunkCodec.Kind kind, byte[] original, int chunkSize, byte[] key) {
        var id = segment.remoteLogSegmentId();
        ChunkCodec codec = new ChunkCodec(id.topicIdPartition().topicId(), id.id(), kind, 3, key);
        java.io.ByteArrayOutputStream stored = new java.io.ByteArrayOutputStream();
        List<Long> sizes = new ArrayList<>();
        for (int number = 0; number * chunkSize < original.length; number++) {
            int from = number * chunkSize;
            byte[] chunk = codec.encode(number, original, from, Math.min(chunkSize, original.length - from));
            sizes.add((long) chunk.length);
            stored.writeBytes(chunk);
        }
        return Map.entry(stored.toByteArray(), sizes);
    }

    @Test
    void aSegmentStoredAsChunksIsReadByItsUrlAndDecodedHereAndATamperedChunkIsNotServed(@TempDir Path dir)
            throws Exception {
        int chunkSize = 65_536;
        byte[] log = new byte[200_000];
        for (int i = 0; i < log.length; i++) {
            log[i] = (byte) (i % 251 < 200 ? 'a' + i % 7 : i);
        }
        byte[] offsets = new byte[300];
        new java.util.Random(5).nextBytes(offsets);
        byte[] key = new byte[32];
        new java.util.Random(9).nextBytes(key);
        RemoteLogSegmentMetadata segment = ProtosTest.segmentOfSize(log.length);
        var storedLog = chunked(segment, ChunkCodec.Kind.LOG, log, chunkSize, key);
        var storedIndexes = chunked(segment, ChunkCodec.Kind.INDEXES, offsets, chunkSize, key);
        Path logFile = Files.write(dir.resolve("0.log"), storedLog.getKey());
        urlsToGive.add(logFile.toUri().toString());
        indexesToGive =
                GetLogSegmentUrlResponse.newBuilder()
                        .setIndexesUrl(Files.write(dir.resolve("0.indexes"), storedIndexes.getKey()).toUri().toString())
                        .addIndexRanges(IndexRange.newBuilder()
                                .setIndexType(remotelog.api.segmentstore.v1.SegmentStore.IndexType.INDEX_TYPE_OFFSET)
                                .setPosition(0)
                                .setSize(offsets.length))
                        .setChunks(SegmentChunks.newBuilder()
                                .setChunkSize(chunkSize)
                                .addAllLogStoredSizes(storedLog.getValue())
                                .setIndexesSize(offsets.length)
                                .addAllIndexesStoredSizes(storedIndexes.getValue())
                                .setDataKey(ByteString.copyFrom(key)))
                        .build();
        fileRoots = dir.toString();
        connect(serverName);
        assertArrayEquals(log, readAll(manager.fetchLogSegment(segment, 0)));
        assertArrayEquals(
                java.util.Arrays.copyOfRange(log, 65_000, 140_001),
                readAll(manager.fetchLogSegment(segment, 65_000, 140_000)));
        assertArrayEquals(offsets, readAll(manager.fetchIndex(segment, IndexType.OFFSET)));
        assertEquals(0, fetchCalls.get()); // every read by URL
        assertEquals(1, urlsAsked.get());

        byte[] tampered = storedLog.getKey().clone();
        tampered[Math.toIntExact(storedLog.getValue().get(0) + storedLog.getValue().get(1) + 40)] ^= 1;
        Files.write(logFile, tampered);
        assertArrayEquals(java.util.Arrays.copyOfRange(log, 0, 1000), readAll(manager.fetchLogSegment(segment, 0, 999)));
        java.io.IOException corrupt =
                assertThrows(java.io.IOException.class, () -> readAll(manager.fetchLogSegment(segment, 140_000, 140_999)));
        assertTrue(corrupt.getMessage().contains("log chunk 2: fails its authentication"), corrupt.getMessage());
    }

    @Test
    void positionsPast2GiBReachTheStoreWholeThroughKip1333sOverloads() throws Exception {
        long start = 3L << 30;
        try (InputStream stream = manager.fetchLogSegment(segment(), start, start + 99)) {
            assertEquals(0, stream.read()); // the first chunk's mark
        }
        try (InputStream stream = manager.fetchLogSegment(segment(), start + 1)) {
            assertTrue(stream.read() >= 0);
        }
        assertEquals(start, fetchesAsked.get(0).getStartPosition());
        assertEquals(start + 99, fetchesAsked.get(0).getEndPosition());
        assertEquals(start + 1, fetchesAsked.get(1).getStartPosition());
        assertFalse(fetchesAsked.get(1).hasEndPosition());
    }

    /** Two reads of new segments, both through the stream, with one GetLogSegmentUrl. */
    void twoReadsStreamedAfterOneAsk() throws Exception {
        for (int i = 0; i < 2; i++) {
            try (InputStream stream = manager.fetchLogSegment(segment(), 0)) {
                assertTrue(stream.read() >= 0);
            }
        }
        assertEquals(2, fetchCalls.get());
        assertEquals(1, urlsAsked.get());
    }

    @Test
    void aFileThisHostCannotOpenIsReadThroughTheStream() throws Exception {
        urlsToGive.add("file:///nowhere/0.log");
        // URLs rest after a failure: the next read takes the stream without asking.
        twoReadsStreamedAfterOneAsk();
    }

    @Test
    void aStoreWithoutUrlsIsAskedOnceThenStreamed() throws Exception {
        twoReadsStreamedAfterOneAsk(); // UNIMPLEMENTED: never asked again
    }

    @Test
    void aStoreThatCannotHandOutAUrlNowIsNotAskedAgainAtOnce() throws Exception {
        urlsToGive.add("file:///never/read.log");
        urlsUnavailable = true;
        twoReadsStreamedAfterOneAsk(); // the second read within the pause: streamed, not asked
    }

    /** An HTTP server on a free loopback port, answering every path with `handler`. */
    static com.sun.net.httpserver.HttpServer httpServer(com.sun.net.httpserver.HttpHandler handler)
            throws java.io.IOException {
        com.sun.net.httpserver.HttpServer http =
                com.sun.net.httpserver.HttpServer.create(new java.net.InetSocketAddress("127.0.0.1", 0), 0);
        http.createContext("/", handler);
        // A thread per exchange, so one a test holds (a stalled body) delays no other.
        http.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
        http.start();
        return http;
    }

    @Test
    void anS3UrlIsReadByRangeAndA404IsAMissingSegment() throws Exception {
        byte[] log = new byte[50_000];
        new java.util.Random(3).nextBytes(log);
        List<String> ranges = new ArrayList<>();
        AtomicInteger requests = new AtomicInteger();
        com.sun.net.httpserver.HttpServer http =
                httpServer(exchange -> {
                    String range = exchange.getRequestHeaders().getFirst("Range");
                    ranges.add(exchange.getRequestURI().getPath() + " " + range);
                    if (exchange.getRequestURI().getPath().equals("/gone")) {
                        exchange.sendResponseHeaders(404, -1);
                    } else if (requests.incrementAndGet() == 1) {
                        exchange.sendResponseHeaders(403, -1); // expired early: a new URL reads
                    } else if (requests.get() == 3) {
                        // GCS's answer to an expired V4 URL: a 400, which is a refusal too.
                        byte[] expired =
                                "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>"
                                        .getBytes(StandardCharsets.UTF_8);
                        exchange.sendResponseHeaders(400, expired.length);
                        exchange.getResponseBody().write(expired);
                    } else {
                        String[] bounds = range.substring("bytes=".length()).split("-", -1);
                        int first = Integer.parseInt(bounds[0]);
                        int last = bounds[1].isEmpty() ? log.length - 1 : Integer.parseInt(bounds[1]);
                        exchange.sendResponseHeaders(206, last - first + 1);
                        try (OutputStream body = exchange.getResponseBody()) {
                            body.write(log, first, last - first + 1);
                        }
                    }
                    exchange.close();
                });
        try {
            String base = "http://127.0.0.1:" + http.getAddress().getPort();
            urlsToGive.add(base + "/log");
            RemoteLogSegmentMetadata segment = segment();
            assertArrayEquals(
                    java.util.Arrays.copyOfRange(log, 10, log.length),
                    readAll(manager.fetchLogSegment(segment, 10)));
            assertArrayEquals(
                    java.util.Arrays.copyOfRange(log, 5, 106), readAll(manager.fetchLogSegment(segment, 5, 105)));
            assertEquals(List.of("/log bytes=10-", "/log bytes=10-", "/log bytes=5-105", "/log bytes=5-105"), ranges);
            assertEquals(3, urlsAsked.get());
            assertEquals(0, fetchChunksSent.get());
            urlsToGive.set(0, base + "/gone");
            urlsAsked.set(0);
            assertThrows(
                    RemoteResourceNotFoundException.class,
                    () -> manager.fetchLogSegment(ProtosTest.segment(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, Optional.empty()), 0));
            manager.close(); // ends the HTTP client's threads
            for (Thread thread : Thread.getAllStackTraces().keySet()) {
                if (thread.getName().equals("remotelog-fetch-urls")) {
                    thread.join(10_000);
                    assertFalse(thread.isAlive(), "an HTTP client thread outlived close()");
                }
            }
        } finally {
            http.stop(0);
        }
    }

    @Test
    void anS3ReadSlowedDownOrCutOffGoesOnFromTheByteWhereItStopped() throws Exception {
        byte[] log = new byte[300_000];
        new java.util.Random(5).nextBytes(log);
        List<String> ranges = new ArrayList<>();
        // The first GET is answered SlowDown, the second cut off after 100,000 bytes.
        AtomicInteger answers = new AtomicInteger();
        com.sun.net.httpserver.HttpServer http =
                httpServer(exchange -> {
                    String range = exchange.getRequestHeaders().getFirst("Range");
                    ranges.add(range);
                    int answer = answers.getAndIncrement();
                    if (answer == 0) {
                        exchange.sendResponseHeaders(503, -1);
                        exchange.close();
                        return;
                    }
                    int first = Integer.parseInt(range.substring("bytes=".length(), range.indexOf('-')));
                    int last = log.length - 1;
                    exchange.getResponseHeaders()
                            .add("Content-Range", "bytes " + first + "-" + last + "/" + log.length);
                    exchange.sendResponseHeaders(206, last - first + 1);
                    OutputStream body = exchange.getResponseBody();
                    if (answer == 1) {
                        body.write(log, first, 100_000);
                        body.flush();
                        // Thrown out of the handler, HttpServer closes the connection.
                        throw new java.io.IOException("cut off");
                    }
                    body.write(log, first, last - first + 1);
                    body.close();
                });
        try {
            urlsToGive.add("http://127.0.0.1:" + http.getAddress().getPort() + "/log");
            assertArrayEquals(
                    java.util.Arrays.copyOfRange(log, 10, log.length),
                    readAll(manager.fetchLogSegment(segment(), 10)));
            assertEquals(3, ranges.size(), ranges.toString());
            assertEquals("bytes=10-", ranges.get(0));
            assertEquals("bytes=10-", ranges.get(1));
            // The server's close may reset the connection before all 100,000 bytes
            // arrive; the read goes on from whatever byte it had reached.
            String resumed = ranges.get(2);
            assertTrue(resumed.endsWith("-" + (log.length - 1)), resumed);
            int from = Integer.parseInt(resumed.substring("bytes=".length(), resumed.indexOf('-')));
            assertTrue(from >= 10 && from <= 10 + 100_000, resumed);
            assertEquals(2, Jmx.read(Jmx.STORAGE, "url-read-retries-total"));
            assertEquals(0, fetchCalls.get()); // never the stream
        } finally {
            http.stop(0);
        }
    }

    /** A server of `log` whose GETs numbered in `stalling` send `sent` bytes, then nothing
     * until `released` (as an S3 connection that stops sending mid-body); the ranges asked. */
    com.sun.net.httpserver.HttpServer stallingServer(
            byte[] log,
            java.util.function.IntPredicate stalling,
            int sent,
            CountDownLatch released,
            List<String> ranges)
            throws Exception {
        AtomicInteger answers = new AtomicInteger();
        return httpServer(exchange -> {
            String range = exchange.getRequestHeaders().getFirst("Range");
            ranges.add(range);
            int first = Integer.parseInt(range.substring("bytes=".length(), range.indexOf('-')));
            int last = log.length - 1;
            exchange.getResponseHeaders().add("Content-Range", "bytes " + first + "-" + last + "/" + log.length);
            exchange.sendResponseHeaders(206, last - first + 1);
            OutputStream body = exchange.getResponseBody();
            if (stalling.test(answers.getAndIncrement())) {
                body.write(log, first, Math.min(sent, last - first + 1));
                body.flush();
                awaitAtMost(released, 60);
                exchange.close();
                return;
            }
            body.write(log, first, last - first + 1);
            body.close();
        });
    }

    @Test
    void anS3ReadThatStopsSendingMidBodyGoesOnFromTheByteWhereItStopped() throws Exception {
        timeoutMs = 1_500; // a body silent for 500 ms is asked again
        connect(serverName);
        byte[] log = new byte[300_000];
        new java.util.Random(7).nextBytes(log);
        List<String> ranges = java.util.Collections.synchronizedList(new ArrayList<>());
        CountDownLatch released = new CountDownLatch(1);
        com.sun.net.httpserver.HttpServer http = stallingServer(log, answer -> answer == 0, 100_000, released, ranges);
        try {
            urlsToGive.add("http://127.0.0.1:" + http.getAddress().getPort() + "/log");
            assertArrayEquals(
                    java.util.Arrays.copyOfRange(log, 10, log.length),
                    readAll(manager.fetchLogSegment(segment(), 10)));
            assertEquals(2, ranges.size(), ranges.toString());
            assertEquals("bytes=10-", ranges.get(0));
            assertEquals("bytes=100010-" + (log.length - 1), ranges.get(1));
            assertEquals(0, fetchCalls.get()); // never the stream
        } finally {
            released.countDown();
            http.stop(0);
        }
    }

    @Test
    void anS3ReadThatNeverSendsAgainFailsAtItsDeadlineAndHoldsNoThread() throws Exception {
        timeoutMs = 1_500;
        connect(serverName);
        byte[] log = new byte[300_000];
        List<String> ranges = java.util.Collections.synchronizedList(new ArrayList<>());
        CountDownLatch released = new CountDownLatch(1);
        com.sun.net.httpserver.HttpServer http = stallingServer(log, answer -> true, 1_000, released, ranges);
        try {
            urlsToGive.add("http://127.0.0.1:" + http.getAddress().getPort() + "/log");
            InputStream in = manager.fetchLogSegment(segment(), 0);
            java.io.IOException failure = assertThrows(java.io.IOException.class, () -> readAll(in));
            assertTrue(failure.getMessage().contains("sent nothing for 500 ms"), failure.toString());
            // Asked again from where each stall stopped, until the read's deadline.
            assertTrue(ranges.size() >= 2, ranges.toString());
        } finally {
            released.countDown();
            http.stop(0);
        }
    }

    @Test
    void anS3LogIsReadAheadInChunksThatKafkasNextFetchesFind() throws Exception {
        readAheadChunks = 2;
        connect(serverName);
        byte[] log = new byte[READ_AHEAD_CHUNK * 5 + 1000];
        new java.util.Random(11).nextBytes(log);
        List<String> served = java.util.Collections.synchronizedList(new ArrayList<>());
        com.sun.net.httpserver.HttpServer http = rangeServer(Map.of("/log", log), served, 1);
        try {
            urlsToGive.add("http://127.0.0.1:" + http.getAddress().getPort() + "/log");
            RemoteLogSegmentMetadata segment = ProtosTest.segmentOfSize(log.length);
            // As Kafka fetches: 100,000 bytes a time, each read starting a little before
            // where the last one stopped (the offset index's granularity), then closed.
            for (int position = 0; position < log.length; position += 96_000) {
                byte[] fetched;
                try (InputStream in = manager.fetchLogSegment(segment, position)) {
                    fetched = in.readNBytes(100_000);
                }
                assertArrayEquals(java.util.Arrays.copyOfRange(log, position, Math.min(position + 100_000, log.length)), fetched);
            }
            List<String> chunks = new ArrayList<>(served);
            chunks.sort(java.util.Comparator.comparingInt(range -> Integer.parseInt(range.split("[=-]")[1])));
            List<String> each = new ArrayList<>();
            for (int first = 0; first < log.length; first += READ_AHEAD_CHUNK) {
                each.add("/log bytes=" + first + "-" + (Math.min(first + READ_AHEAD_CHUNK, log.length) - 1));
            }
            assertEquals(each, chunks); // every chunk once, by one GET
            assertEquals(2, urlsAsked.get()); // the refused URL was renewed once
            assertEquals(5, Jmx.read(Jmx.STORAGE, "read-ahead-chunks-total"));
            assertTrue(Jmx.read(Jmx.STORAGE, "read-ahead-hits-total") >= 5);
            assertEquals(0, fetchCalls.get()); // never the stream
        } finally {
            http.stop(0);
        }
    }

    /**
     * Serves `objects` by path to ranged GETs, recording "path range" of each it answers;
     * the first `refusals` GETs are refused 403, as by an expired URL.
     */
    static com.sun.net.httpserver.HttpServer rangeServer(
            Map<String, byte[]> objects, List<String> served, int refusals) throws java.io.IOException {
        AtomicInteger refusing = new AtomicInteger(refusals);
        return httpServer(exchange -> {
            if (refusing.getAndDecrement() > 0) {
                exchange.sendResponseHeaders(403, -1);
                exchange.close();
                return;
            }
            String path = exchange.getRequestURI().getPath();
            byte[] object = objects.get(path);
            String range = exchange.getRequestHeaders().getFirst("Range");
            String[] bounds = range.substring("bytes=".length()).split("-", -1);
            int first = Integer.parseInt(bounds[0]);
            int last = Math.min(bounds[1].isEmpty() ? object.length - 1 : Integer.parseInt(bounds[1]), object.length - 1);
            served.add(path + " bytes=" + first + "-" + last);
            exchange.getResponseHeaders().add("Content-Range", "bytes " + first + "-" + last + "/" + object.length);
            exchange.sendResponseHeaders(206, last - first + 1);
            try (OutputStream body = exchange.getResponseBody()) {
                body.write(object, first, last - first + 1);
            }
        });
    }

    @Test
    void anS3SegmentsIndexesAreReadByOneGetAndItsLogsFirstChunkBesideThem() throws Exception {
        readAheadChunks = 2;
        connect(serverName);
        byte[] indexes = new byte[300];
        new java.util.Random(13).nextBytes(indexes);
        byte[] log = new byte[READ_AHEAD_CHUNK * 2];
        new java.util.Random(17).nextBytes(log);
        List<String> served = java.util.Collections.synchronizedList(new ArrayList<>());
        com.sun.net.httpserver.HttpServer http =
                rangeServer(Map.of("/indexes", indexes, "/log", log), served, 0);
        try {
            String base = "http://127.0.0.1:" + http.getAddress().getPort();
            urlsToGive.add(base + "/log");
            indexesToGive =
                    GetLogSegmentUrlResponse.newBuilder()
                            .setIndexesUrl(base + "/indexes")
                            .addIndexRanges(range(SegmentStore.IndexType.INDEX_TYPE_OFFSET, 0, 100))
                            .addIndexRanges(range(SegmentStore.IndexType.INDEX_TYPE_TIMESTAMP, 100, 150))
                            .addIndexRanges(range(SegmentStore.IndexType.INDEX_TYPE_TRANSACTION, 250, 50))
                            .build();
            RemoteLogSegmentMetadata segment = ProtosTest.segmentOfSize(log.length);
            // In the order Kafka's RemoteIndexCache reads them, then the segment's first fetch.
            assertArrayEquals(java.util.Arrays.copyOfRange(indexes, 0, 100), readAll(manager.fetchIndex(segment, IndexType.OFFSET)));
            assertArrayEquals(java.util.Arrays.copyOfRange(indexes, 100, 250), readAll(manager.fetchIndex(segment, IndexType.TIMESTAMP)));
            assertArrayEquals(java.util.Arrays.copyOfRange(indexes, 250, 300), readAll(manager.fetchIndex(segment, IndexType.TRANSACTION)));
            try (InputStream in = manager.fetchLogSegment(segment, 0)) {
                assertArrayEquals(java.util.Arrays.copyOfRange(log, 0, 1000), in.readNBytes(1000));
            }
            List<String> gets = new ArrayList<>(served);
            gets.remove("/log bytes=" + READ_AHEAD_CHUNK + "-" + (2 * READ_AHEAD_CHUNK - 1)); // ahead of the fetch
            java.util.Collections.sort(gets);
            // The log's first chunk was asked for with the offset index, and fetched once.
            assertEquals(List.of("/indexes bytes=0-299", "/log bytes=0-" + (READ_AHEAD_CHUNK - 1)), gets);
            assertEquals(2, Jmx.read(Jmx.STORAGE, "read-ahead-chunks-total")); // that one and the next
            assertEquals(1, urlsAsked.get());
            assertEquals(0, indexCalls.get());
            assertEquals(0, fetchCalls.get());
            // Found: the timestamp and transaction indexes in the indexes' chunk, and the
            // log's first chunk.
            assertEquals(3, Jmx.read(Jmx.STORAGE, "read-ahead-hits-total"));
        } finally {
            http.stop(0);
        }
    }

    @Test
    void theNextSegmentsUrlsIndexesAndFirstChunkAreReadyBeforeKafkaCrossesIntoIt() throws Exception {
        readAheadChunks = 2;
        java.util.Random random = new java.util.Random(19);
        byte[] first = new byte[READ_AHEAD_CHUNK + 500];
        byte[] second = new byte[READ_AHEAD_CHUNK * 3];
        byte[] indexes = new byte[300];
        random.nextBytes(first);
        random.nextBytes(second);
        random.nextBytes(indexes);
        List<String> served = java.util.Collections.synchronizedList(new ArrayList<>());
        com.sun.net.httpserver.HttpServer http =
                rangeServer(Map.of("/first", first, "/second", second, "/indexes", indexes), served, 0);
        RemoteLogSegmentMetadata one = ProtosTest.segmentOfSize(first.length);
        RemoteLogSegmentMetadata two = ProtosTest.segmentOfSize(second.length);
        // The metadata manager, at rsm.config.metadata.manager.address: `two` follows
        // `one`, then none.
        List<GetRemoteLogSegmentMetadataRequest> asked = new java.util.concurrent.CopyOnWriteArrayList<>();
        var metadata =
                new RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceImplBase() {
                    @Override
                    public void getRemoteLogSegmentMetadata(
                            GetRemoteLogSegmentMetadataRequest request,
                            StreamObserver<GetRemoteLogSegmentMetadataResponse> response) {
                        asked.add(request);
                        var answer = GetRemoteLogSegmentMetadataResponse.newBuilder();
                        if (asked.size() == 1) {
                            answer.setRemoteLogSegmentMetadata(Protos.metadata(two));
                        }
                        response.onNext(answer.build());
                        response.onCompleted();
                    }
                };
        io.grpc.Server lookups =
                io.grpc.Grpc.newServerBuilderForPort(0, io.grpc.InsecureServerCredentials.create())
                        .addService(metadata)
                        .build()
                        .start();
        nextSegmentAddress = "127.0.0.1:" + lookups.getPort();
        connect(serverName);
        try {
            String base = "http://127.0.0.1:" + http.getAddress().getPort();
            urlsToGive.addAll(List.of(base + "/first", base + "/second"));
            indexesToGive =
                    GetLogSegmentUrlResponse.newBuilder()
                            .setIndexesUrl(base + "/indexes")
                            .addIndexRanges(range(SegmentStore.IndexType.INDEX_TYPE_OFFSET, 0, 100))
                            .addIndexRanges(range(SegmentStore.IndexType.INDEX_TYPE_TIMESTAMP, 100, 200))
                            .build();
            try (InputStream in = manager.fetchLogSegment(one, 0)) {
                assertArrayEquals(first, in.readAllBytes());
            }
            // Before Kafka asks for anything of `two`: its URLs, and the first chunks of its
            // indexes and of its log, are on their way.
            assertEquals(1, Jmx.await(Jmx.STORAGE, "next-segments-prepared-total", 1));
            String indexesChunk = "/indexes bytes=0-299";
            String logChunk = "/second bytes=0-" + (READ_AHEAD_CHUNK - 1);
            for (int i = 0; i < 1000 && !(served.contains(indexesChunk) && served.contains(logChunk)); i++) {
                Thread.sleep(10);
            }
            assertTrue(served.containsAll(List.of(indexesChunk, logChunk)), served.toString());
            assertEquals(2, urlsAsked.get());
            double hits = Jmx.read(Jmx.STORAGE, "read-ahead-hits-total");
            // Kafka crosses into `two`: its offset index, then a fetch from byte 0.
            assertArrayEquals(java.util.Arrays.copyOfRange(indexes, 0, 100), readAll(manager.fetchIndex(two, IndexType.OFFSET)));
            try (InputStream in = manager.fetchLogSegment(two, 0)) {
                assertArrayEquals(java.util.Arrays.copyOfRange(second, 0, 1000), in.readNBytes(1000));
            }
            assertEquals(2, urlsAsked.get()); // nothing asked of the store on the way
            assertEquals(hits + 2, Jmx.read(Jmx.STORAGE, "read-ahead-hits-total")); // both chunks found
            assertEquals(1, java.util.Collections.frequency(served, indexesChunk));
            assertEquals(1, java.util.Collections.frequency(served, logChunk));
            // Nothing is known after `two`: nothing more was got ready.
            assertEquals(1, Jmx.read(Jmx.STORAGE, "next-segments-prepared-total"));
            assertEquals(0, fetchCalls.get());
            // Asked as Kafka will ask at one's end: the offset after it, in its last epoch.
            assertEquals(200, asked.get(0).getOffset());
            assertEquals(2, asked.get(0).getLeaderEpoch());
            assertEquals(
                    1,
                    Jmx.await(Jmx.STORAGE + ",method=GetRemoteLogSegmentMetadata", "calls-total", 1),
                    "counted among the storage manager's calls");
        } finally {
            lookups.shutdownNow();
            http.stop(0);
        }
    }

    @Test
    void indexesAreReadFromTheirFileByTheOneAnswerTheLogIs(@TempDir Path dir) throws Exception {
        byte[] indexes = {9, 9, 1, 2, 3, 4, 5, 6, 7, 8};
        Path file = Files.write(dir.resolve("0.indexes"), indexes);
        Path log = Files.write(dir.resolve("0.log"), new byte[] {42});
        urlsToGive.add(log.toUri().toString());
        indexesToGive =
                GetLogSegmentUrlResponse.newBuilder()
                        .setIndexesUrl(file.toUri().toString())
                        .addIndexRanges(range(SegmentStore.IndexType.INDEX_TYPE_OFFSET, 2, 8))
                        .addIndexRanges(range(SegmentStore.IndexType.INDEX_TYPE_TIMESTAMP, 10, 0))
                        .build();
        RemoteLogSegmentMetadata segment = segment();
        assertArrayEquals(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, readAll(manager.fetchIndex(segment, IndexType.OFFSET)));
        assertArrayEquals(new byte[0], readAll(manager.fetchIndex(segment, IndexType.TIMESTAMP)));
        // Not in the answer: the segment has none, as FetchIndex would say.
        assertThrows(RemoteResourceNotFoundException.class, () -> manager.fetchIndex(segment, IndexType.TRANSACTION));
        assertArrayEquals(new byte[] {42}, readAll(manager.fetchLogSegment(segment, 0)));
        assertEquals(1, urlsAsked.get());
        assertEquals(0, indexCalls.get());
        assertEquals(0, fetchCalls.get());
    }

    @Test
    void aFollowersAuxStateIsReadThroughTheStoreEvenWithUrls(@TempDir Path dir) throws Exception {
        urlsToGive.add(Files.write(dir.resolve("0.log"), new byte[] {42}).toUri().toString());
        RemoteLogSegmentMetadata segment = segment();
        for (IndexType aux : new IndexType[] {IndexType.LEADER_EPOCH, IndexType.PRODUCER_SNAPSHOT}) {
            // The test store answers FetchIndex NOT_FOUND: the call reached it.
            assertThrows(RemoteResourceNotFoundException.class, () -> manager.fetchIndex(segment, aux));
        }
        assertEquals(2, indexCalls.get());
        assertEquals(0, urlsAsked.get());
    }

    static SegmentStore.IndexRange range(SegmentStore.IndexType type, long position, long size) {
        return SegmentStore.IndexRange.newBuilder().setIndexType(type).setPosition(position).setSize(size).build();
    }
}
