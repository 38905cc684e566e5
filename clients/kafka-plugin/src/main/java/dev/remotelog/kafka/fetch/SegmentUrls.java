package dev.remotelog.kafka.fetch;

import dev.remotelog.kafka.rpc.Failures;
import dev.remotelog.kafka.transforms.ChunkCodec;
import dev.remotelog.kafka.transforms.ChunkIndex;
import dev.remotelog.kafka.util.BoundedMaps;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.net.URI;
import java.time.Duration;
import java.util.EnumMap;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import remotelog.api.segmentstore.v1.SegmentStore.GetLogSegmentUrlResponse;
import remotelog.api.segmentstore.v1.SegmentStore.IndexRange;
import remotelog.api.segmentstore.v1.SegmentStore.IndexType;
import remotelog.api.segmentstore.v1.SegmentStore.SegmentChunks;

/**
 * The URLs the store hands out for each segment (GetLogSegmentUrl), kept until shortly
 * before they expire, so one call serves all of a segment's reads. A store that hands out
 * none is not asked again; after a failure to read by URL, URLs rest a while (paused), so
 * an unreachable endpoint costs one read, not each.
 */
public final class SegmentUrls {
    private static final Logger log = LoggerFactory.getLogger(SegmentUrls.class);
    static final long PAUSE_NANOS = Duration.ofSeconds(10).toNanos();
    // A URL is given up this long before it expires: the store's clock may run ahead.
    static final long EXPIRY_MARGIN_MS = 30_000;
    static final int MAX_ENTRIES = 4096;

    /** A store's answer for one segment: its log's URL, its indexes' and where each lies;
     * for a segment stored as chunks, their indexes and its data key (kept no longer than
     * its URLs, never logged). */
    static final class Kept {
        final URI log;
        final URI indexes;
        final Map<IndexType, IndexRange> ranges;
        final long useUntilNanos;
        final ChunkIndex logChunks;
        final ChunkIndex indexesChunks;
        private final byte[] dataKey;

        Kept(URI log, URI indexes, Map<IndexType, IndexRange> ranges, long useUntilNanos) {
            this(log, indexes, ranges, useUntilNanos, null, null, null);
        }

        Kept(URI log, URI indexes, Map<IndexType, IndexRange> ranges, long useUntilNanos,
                ChunkIndex logChunks, ChunkIndex indexesChunks, byte[] dataKey) {
            this.log = log;
            this.indexes = indexes;
            this.ranges = ranges;
            this.useUntilNanos = useUntilNanos;
            this.logChunks = logChunks;
            this.indexesChunks = indexesChunks;
            this.dataKey = dataKey;
        }

        boolean isFile() {
            return "file".equals(log.getScheme());
        }

        boolean chunked() {
            return logChunks != null;
        }

        /** The codec that decodes one of the segment's objects (chunked() only). */
        ChunkCodec codec(RemoteLogSegmentId segment, ChunkCodec.Kind kind) {
            return new ChunkCodec(segment.topicIdPartition().topicId(), segment.id(), kind, null, dataKey);
        }

        /** Bytes of the object at `log`, for a segment log of `segmentSize` bytes. */
        long logObjectSize(long segmentSize) {
            return chunked() ? logChunks.storedSize() : segmentSize;
        }

        /** Bytes of the segment's indexes object: up to the end of its last index. */
        long indexesSize() {
            if (chunked()) {
                return indexesChunks.storedSize();
            }
            long size = 0;
            for (IndexRange range : ranges.values()) {
                size = Math.max(size, range.getPosition() + range.getSize());
            }
            return size;
        }
    }

    private final Map<RemoteLogSegmentId, Kept> urls = BoundedMaps.keepingNewest(MAX_ENTRIES, true);
    // Segments the store has no URL for (stored as chunks): read through the stream.
    private final Map<RemoteLogSegmentId, Boolean> noUrl = BoundedMaps.keepingNewest(MAX_ENTRIES, true);
    private volatile boolean offered = true;
    private volatile long pausedUntilNanos = System.nanoTime();

    /** Whether reads may go by URL now: the store offers them and they are not resting. */
    boolean usable() {
        return offered && System.nanoTime() - pausedUntilNanos >= 0;
    }

    /** The URLs of the segment whose log has `size` bytes: kept, or asked of `ask` now;
     * null where there are none to use. */
    Kept of(RemoteLogSegmentId segment, long size, Supplier<GetLogSegmentUrlResponse> ask) {
        Kept kept = kept(segment);
        if (kept != null) {
            return kept;
        }
        synchronized (this) {
            if (noUrl.containsKey(segment)) {
                return null;
            }
        }
        return fresh(segment, size, ask);
    }

    synchronized void forget(RemoteLogSegmentId segment) {
        urls.remove(segment);
    }

    /** Rests the URLs after `e`, a failed read of `segment` by URL; null, for the caller. */
    <T> T pause(RemoteLogSegmentId segment, IOException e) {
        pausedUntilNanos = System.nanoTime() + PAUSE_NANOS;
        // The message names no URL: a presigned one is a credential.
        log.warn("Reading {} through FetchLogSegment instead of its URL: {}", segment, e.toString());
        return null;
    }

    /** No read goes by URL from now on. */
    void stop() {
        offered = false;
    }

    private synchronized Kept kept(RemoteLogSegmentId segment) {
        Kept kept = urls.get(segment);
        if (kept != null && System.nanoTime() - kept.useUntilNanos >= 0) {
            urls.remove(segment);
            return null;
        }
        return kept;
    }

    private Kept fresh(RemoteLogSegmentId segment, long size, Supplier<GetLogSegmentUrlResponse> ask) {
        GetLogSegmentUrlResponse answer;
        try {
            answer = ask.get();
        } catch (StatusRuntimeException e) {
            Status.Code code = e.getStatus().getCode();
            if (code == Status.Code.UNIMPLEMENTED && Failures.ofOneSegment(e)) {
                // This segment has none (stored as chunks, and its data key goes over no
                // channel without TLS): the others still go by URL.
                synchronized (this) {
                    noUrl.put(segment, Boolean.TRUE);
                }
                return null;
            }
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
        long useUntil = System.nanoTime() + usableMs * 1_000_000;
        Kept kept = new Kept(log, indexes, ranges, useUntil);
        if (answer.hasChunks()) {
            SegmentChunks chunks = answer.getChunks();
            try {
                kept = new Kept(log, indexes, ranges, useUntil,
                        new ChunkIndex(chunks.getChunkSize(), size, chunks.getLogStoredSizesList()),
                        new ChunkIndex(chunks.getChunkSize(), chunks.getIndexesSize(), chunks.getIndexesStoredSizesList()),
                        chunks.getDataKey().isEmpty() ? null : chunks.getDataKey().toByteArray());
            } catch (IllegalArgumentException e) {
                return pause(segment, new IOException("the store's chunk index does not fit the segment: " + e.getMessage()));
            }
        }
        synchronized (this) {
            urls.put(segment, kept);
        }
        return kept;
    }
}
