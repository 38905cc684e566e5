package dev.remotelog.kafka;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import remotelog.api.segmentstore.v1.SegmentStore.GetLogSegmentUrlResponse;
import remotelog.api.segmentstore.v1.SegmentStore.IndexRange;
import remotelog.api.segmentstore.v1.SegmentStore.IndexType;

/**
 * Segment logs and indexes read from the URLs the store hands out for each segment
 * (GetLogSegmentUrl), so their bytes skip the store and one call serves all of a
 * segment's reads: a file:// URL from a filesystem store on this host (read from the
 * page cache, as LocalTieredStorage reads), a presigned GET from an S3 store (one hop, S3
 * to the broker). A URL is kept per segment until shortly before it expires.
 *
 * <p>Where a read cannot start by URL (a store that hands out none, a file this host
 * cannot open, an endpoint it cannot reach), open() answers null and the caller streams
 * the bytes through FetchLogSegment, which also says whether a segment is gone. After
 * such a failure URLs rest a while, so an unreachable endpoint costs one read, not each.
 */
final class FetchUrls {
    private static final Logger log = LoggerFactory.getLogger(FetchUrls.class);
    static final long PAUSE_NANOS = Duration.ofSeconds(10).toNanos();
    // A URL is given up this long before it expires: the store's clock may run ahead.
    static final long EXPIRY_MARGIN_MS = 30_000;
    static final int MAX_ENTRIES = 4096;

    /** A store's answer for one segment: its log's URL, its indexes' and where each lies. */
    private static final class Kept {
        final URI log;
        final URI indexes;
        final Map<IndexType, IndexRange> ranges;
        final long useUntilNanos;

        Kept(URI log, URI indexes, Map<IndexType, IndexRange> ranges, long useUntilNanos) {
            this.log = log;
            this.indexes = indexes;
            this.ranges = ranges;
            this.useUntilNanos = useUntilNanos;
        }
    }

    private final long timeoutMs;
    private final Runnable retried;
    // A third of a read's deadline: a body stalled that long is asked again from the byte
    // where it stopped, with time left for the new GET to answer.
    private final StalledReads stalls;
    private final Map<RemoteLogSegmentId, Kept> urls = BoundedMaps.keepingNewest(MAX_ENTRIES, true);
    private volatile boolean offered = true;
    private volatile long pausedUntilNanos = System.nanoTime();
    private volatile boolean usedOnce;
    private HttpClient http;
    private ExecutorService httpThreads;
    private ReadAhead readAhead;
    private HedgedFetcher hedging;

    /** Reads of `timeoutMs` at most each, retries included; `retried` counts each retry. */
    FetchUrls(long timeoutMs, Runnable retried) {
        this.timeoutMs = timeoutMs;
        this.retried = retried;
        this.stalls = new StalledReads(Math.max(50, timeoutMs / 3));
    }

    /**
     * From now on, logs read by HTTP(S) are read in chunks of `chunkBytes`, `ahead` of them
     * fetched ahead of each reader, `maxBytes` held at most (see ReadAhead). `fetchedAhead`
     * counts each chunk asked for ahead, `hit` each a reader found held or on its way.
     */
    synchronized void readAhead(
            int chunkBytes,
            int ahead,
            long maxBytes,
            double hedgePercentile,
            Runnable fetchedAhead,
            Runnable hit,
            Runnable hedged) {
        hedging = new HedgedFetcher(this::range, hedgePercentile, timeoutMs, hedged);
        readAhead = new ReadAhead(chunkBytes, ahead, maxBytes, timeoutMs, hedging, fetchedAhead, hit);
    }

    /**
     * Bytes `start`..`end` (inclusive; null: to the end) of the segment's log of `size`
     * bytes by its URL, asking `ask` for one where none is kept; null where the read must
     * take the stream.
     */
    InputStream open(
            RemoteLogSegmentId segment,
            long start,
            Long end,
            long size,
            Supplier<GetLogSegmentUrlResponse> ask)
            throws RemoteResourceNotFoundException {
        return read(segment, ask, null, start, end, size);
    }

    /**
     * The segment's index of this type by URL; null where the read must take FetchIndex.
     * An index the store says the segment does not have is RemoteResourceNotFoundException,
     * as FetchIndex would answer. `size`: the bytes of the segment's log, whose first chunk
     * a read of its offset index asks for ahead.
     */
    InputStream openIndex(
            RemoteLogSegmentId segment,
            org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType type,
            long size,
            Supplier<GetLogSegmentUrlResponse> ask)
            throws RemoteResourceNotFoundException {
        return read(segment, ask, Protos.indexType(type), 0, null, size);
    }

    /**
     * Gets the segment's reads ready before they come: its URLs kept, and where they are
     * not file URLs and read-ahead is on, the first chunks of its indexes and of its log
     * of `size` bytes asked for (Kafka reads the offset index, then the log from byte 0,
     * when a reader crosses into the segment).
     */
    void prepare(RemoteLogSegmentId segment, long size, Supplier<GetLogSegmentUrlResponse> ask) {
        if (!offered || System.nanoTime() - pausedUntilNanos < 0) {
            return;
        }
        Kept kept = kept(segment);
        if (kept == null) {
            kept = fresh(segment, ask);
        }
        ReadAhead ahead = readAhead;
        if (kept == null || ahead == null || "file".equals(kept.log.getScheme())) {
            return;
        }
        if (kept.indexes != null) {
            ahead.warm(kept.indexes, segment, true, indexesSize(kept));
        }
        ahead.warm(kept.log, segment, size);
    }

    private InputStream read(
            RemoteLogSegmentId segment,
            Supplier<GetLogSegmentUrlResponse> ask,
            IndexType index,
            long start,
            Long end,
            long size)
            throws RemoteResourceNotFoundException {
        if (!offered || System.nanoTime() - pausedUntilNanos < 0) {
            return null;
        }
        for (boolean renewed : new boolean[] {false, true}) {
            Kept kept = kept(segment);
            if (kept == null) {
                kept = fresh(segment, ask);
                if (kept == null) {
                    return null;
                }
            }
            URI url = kept.log;
            long first = start;
            Long last = end;
            if (index != null) {
                if (kept.indexes == null) {
                    return null; // a store that names no indexes object
                }
                IndexRange range = kept.ranges.get(index);
                if (range == null) {
                    throw new RemoteResourceNotFoundException(segment + ": it has no " + index + " index");
                }
                if (range.getSize() == 0) {
                    return InputStream.nullInputStream();
                }
                url = kept.indexes;
                first = range.getPosition();
                last = first + range.getSize() - 1;
            }
            try {
                ReadAhead ahead = readAhead;
                if (ahead != null && index == IndexType.INDEX_TYPE_OFFSET && !"file".equals(kept.log.getScheme())) {
                    ahead.warm(kept.log, segment, size);
                }
                InputStream opened;
                if ("file".equals(url.getScheme())) {
                    opened = openFile(url, first, last); // the page cache reads ahead
                } else if (ahead != null && index == null && size > 0) {
                    opened = ahead.open(url, segment, false, size, first, last);
                } else if (ahead != null && index != null) {
                    opened = ahead.open(url, segment, true, indexesSize(kept), first, last);
                } else {
                    opened = openHttp(url, segment, first, last);
                }
                if (!usedOnce) {
                    usedOnce = true;
                    log.info("Reading segment logs from the {}: URLs the segment store hands out", url.getScheme());
                }
                return opened;
            } catch (Refused e) {
                forget(segment);
                if (renewed) {
                    return pause(segment, e);
                }
            } catch (IOException e) {
                forget(segment);
                return pause(segment, e);
            }
        }
        return null;
    }

    /** Bytes of the segment's indexes object: up to the end of its last index. */
    private static long indexesSize(Kept kept) {
        long size = 0;
        for (IndexRange range : kept.ranges.values()) {
            size = Math.max(size, range.getPosition() + range.getSize());
        }
        return size;
    }

    private static final class Refused extends IOException {
        Refused(String message) {
            super(message);
        }
    }

    private synchronized Kept kept(RemoteLogSegmentId segment) {
        Kept kept = urls.get(segment);
        if (kept != null && System.nanoTime() - kept.useUntilNanos >= 0) {
            urls.remove(segment);
            return null;
        }
        return kept;
    }

    private synchronized void forget(RemoteLogSegmentId segment) {
        urls.remove(segment);
    }

    private Kept fresh(RemoteLogSegmentId segment, Supplier<GetLogSegmentUrlResponse> ask) {
        GetLogSegmentUrlResponse answer;
        try {
            answer = ask.get();
        } catch (StatusRuntimeException e) {
            Status.Code code = e.getStatus().getCode();
            if (code == Status.Code.UNIMPLEMENTED) {
                // This store hands out no URLs (its backend, or its settings): stop asking.
                offered = false;
                log.info("Segment store hands out no fetch URLs; reading through FetchLogSegment");
                return null;
            }
            if (code == Status.Code.NOT_FOUND) {
                return null; // this segment is gone: the stream says so to Kafka
            }
            // A store that cannot answer now is not asked again for each read.
            return pause(segment, new IOException("GetLogSegmentUrl failed: " + code));
        }
        URI log;
        URI indexes = null;
        try {
            log = new URI(answer.getUrl());
            if (!answer.getIndexesUrl().isEmpty()) {
                indexes = new URI(answer.getIndexesUrl());
            }
        } catch (java.net.URISyntaxException e) {
            return pause(segment, new IOException("the store's URL is not a URL"));
        }
        Map<IndexType, IndexRange> ranges = new EnumMap<>(IndexType.class);
        for (IndexRange range : answer.getIndexRangesList()) {
            ranges.put(range.getIndexType(), range);
        }
        long validMs = answer.getValidForMs();
        long usableMs = Math.max(validMs - EXPIRY_MARGIN_MS, validMs / 2);
        Kept kept = new Kept(log, indexes, ranges, System.nanoTime() + usableMs * 1_000_000);
        synchronized (this) {
            urls.put(segment, kept);
        }
        return kept;
    }

    private <T> T pause(RemoteLogSegmentId segment, IOException e) {
        pausedUntilNanos = System.nanoTime() + PAUSE_NANOS;
        // The message names no URL: a presigned one is a credential.
        log.warn("Reading {} through FetchLogSegment instead of its URL: {}", segment, e.toString());
        return null;
    }

    private static InputStream openFile(URI url, long start, Long end) throws IOException {
        FileChannel file = FileChannel.open(Path.of(url), StandardOpenOption.READ);
        try {
            if (start > file.size()) {
                throw new IOException("the file ends before byte " + start);
            }
            file.position(start);
        } catch (IOException e) {
            file.close();
            throw e;
        }
        InputStream in = Channels.newInputStream(file);
        return end == null ? in : new Bounded(in, end - start + 1);
    }

    private InputStream openHttp(URI url, RemoteLogSegmentId segment, long start, Long end)
            throws IOException, RemoteResourceNotFoundException {
        Resuming read = new Resuming(url, segment, start, end, System.nanoTime() + timeoutMs * 1_000_000);
        read.open(null);
        return read;
    }

    /** Bytes `first`..`last` of an object, fewer where it ends first: a read-ahead chunk. */
    private byte[] range(URI url, RemoteLogSegmentId segment, long first, long last)
            throws IOException, RemoteResourceNotFoundException {
        try (InputStream in = openHttp(url, segment, first, last)) {
            return in.readAllBytes();
        }
    }

    /** An answer worth asking again after a pause: S3's SlowDown, its gateways' errors. */
    private static final class Unavailable extends IOException {
        Unavailable(int status) {
            super("HTTP " + status + " to a ranged GET");
        }
    }

    static final long FIRST_RETRY_NANOS = Duration.ofMillis(50).toNanos();
    static final long LAST_RETRY_NANOS = Duration.ofSeconds(1).toNanos();

    /**
     * A ranged GET that, answered SlowDown or a gateway error, asks again, and, cut off
     * midway, asks again from the byte where it stopped: after a pause from 50 ms doubling
     * to 1 s, until the read's deadline. Then the failure is the caller's, as before.
     */
    private final class Resuming extends BulkInputStream {
        private final URI url;
        private final RemoteLogSegmentId segment;
        private final long deadlineNanos;
        private long position;
        private Long end; // the last byte; from the answer's Content-Range for an open range
        private long pauseNanos = FIRST_RETRY_NANOS;
        private InputStream in;
        private boolean closed;

        Resuming(URI url, RemoteLogSegmentId segment, long start, Long end, long deadlineNanos) {
            this.url = url;
            this.segment = segment;
            this.position = start;
            this.end = end;
            this.deadlineNanos = deadlineNanos;
        }

        /** Opens the range from `position`; `cut`: the failure that ended the last one. */
        void open(IOException cut) throws IOException, RemoteResourceNotFoundException {
            IOException failure = cut;
            while (true) {
                if (failure != null) {
                    pause(failure);
                }
                try {
                    HttpResponse<InputStream> response = get(url, segment, position, end);
                    Long covered = lastByte(response);
                    if (end == null || (covered != null && covered < end)) {
                        end = covered; // an object that ends before the range asked for
                    }
                    in = stalls.watch(response.body());
                    return;
                } catch (Unavailable e) {
                    failure = e;
                } catch (Refused e) {
                    throw e; // an expired URL stays expired: a new read asks for a new one
                } catch (IOException e) {
                    if (cut == null) {
                        throw e; // unreachable from the start: the caller takes the stream
                    }
                    failure = e;
                }
            }
        }

        /** Waits before the next attempt, or throws `failure` if the deadline comes first. */
        private void pause(IOException failure) throws IOException {
            if (closed || System.nanoTime() + pauseNanos - deadlineNanos > 0) {
                throw failure;
            }
            try {
                TimeUnit.NANOSECONDS.sleep(pauseNanos);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new java.io.InterruptedIOException("interrupted while retrying " + segment);
            }
            pauseNanos = Math.min(pauseNanos * 2, LAST_RETRY_NANOS);
            retried.run();
        }

        @Override
        public int read(byte[] buffer, int from, int length) throws IOException {
            while (true) {
                if (end != null && position > end) {
                    return -1;
                }
                try {
                    int count = in.read(buffer, from, length);
                    if (count < 0 && end != null) {
                        throw new java.io.EOFException("the answer ended at byte " + position + " of " + (end + 1));
                    }
                    if (count > 0) {
                        position += count;
                    }
                    return count;
                } catch (IOException e) {
                    if (closed) {
                        throw e;
                    }
                    try {
                        in.close();
                    } catch (IOException ignored) {
                        // the connection is gone already
                    }
                    try {
                        open(e);
                    } catch (RemoteResourceNotFoundException gone) {
                        throw new IOException(segment + ": its log object went while it was read", gone);
                    }
                }
            }
        }

        @Override
        public void close() throws IOException {
            closed = true;
            in.close();
        }
    }

    /** The last byte an answer's `Content-Range: bytes first-last/size` covers, or null. */
    private static Long lastByte(HttpResponse<?> response) {
        String range = response.headers().firstValue("Content-Range").orElse("");
        int dash = range.indexOf('-');
        int slash = range.indexOf('/');
        if (!range.startsWith("bytes ") || dash < 0 || slash < dash) {
            return null;
        }
        try {
            return Long.parseLong(range.substring(dash + 1, slash).trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private HttpResponse<InputStream> get(URI url, RemoteLogSegmentId segment, long start, Long end)
            throws IOException, RemoteResourceNotFoundException {
        HttpRequest request =
                HttpRequest.newBuilder(url)
                        .timeout(Duration.ofMillis(timeoutMs))
                        .header("Range", "bytes=" + start + "-" + (end == null ? "" : end))
                        .build();
        HttpResponse<InputStream> response;
        try {
            response = client().send(request, HttpResponse.BodyHandlers.ofInputStream());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        }
        int status = response.statusCode();
        if (status == 206) {
            return response;
        }
        response.body().close();
        if (status == 404) {
            throw new RemoteResourceNotFoundException(segment + ": its log object is gone");
        }
        if (status == 403) {
            throw new Refused("its URL was refused (403)");
        }
        if (status == 500 || status == 502 || status == 503 || status == 504) {
            throw new Unavailable(status);
        }
        // 200 would be the whole object: a server that ignored the range.
        throw new IOException("HTTP " + status + " to a ranged GET");
    }

    private synchronized HttpClient client() {
        if (http == null) {
            httpThreads = DaemonThreads.cached("remotelog-fetch-urls");
            http =
                    HttpClient.newBuilder()
                            .executor(httpThreads)
                            .connectTimeout(Duration.ofMillis(Math.min(timeoutMs, 3_000)))
                            .build();
        }
        return http;
    }

    /** Ends the HTTP client's threads; reads open now fail, later ones take the stream. */
    synchronized void close() {
        offered = false;
        if (readAhead != null) {
            readAhead.close();
        }
        if (hedging != null) {
            hedging.close();
        }
        stalls.close();
        http = null;
        if (httpThreads != null) {
            httpThreads.shutdownNow();
            httpThreads = null;
        }
    }

    /** At most `remaining` bytes of a stream; closing it closes the stream. */
    private static final class Bounded extends InputStream {
        private final InputStream in;
        private long remaining;

        Bounded(InputStream in, long remaining) {
            this.in = in;
            this.remaining = remaining;
        }

        @Override
        public int read() throws IOException {
            if (remaining <= 0) {
                return -1;
            }
            int b = in.read();
            if (b >= 0) {
                remaining--;
            }
            return b;
        }

        @Override
        public int read(byte[] buffer, int from, int length) throws IOException {
            if (remaining <= 0) {
                return -1;
            }
            int count = in.read(buffer, from, (int) Math.min(length, remaining));
            if (count > 0) {
                remaining -= count;
            }
            return count;
        }

        @Override
        public void close() throws IOException {
            in.close();
        }
    }
}
