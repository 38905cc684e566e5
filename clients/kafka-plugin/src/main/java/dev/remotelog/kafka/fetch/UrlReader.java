package dev.remotelog.kafka.fetch;

import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.transforms.ChunkCodec;
import dev.remotelog.kafka.transforms.ChunkIndex;
import dev.remotelog.kafka.transforms.DecodingStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.util.List;
import java.util.function.Supplier;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import remotelog.api.segmentstore.v1.SegmentStore.GetLogSegmentUrlResponse;
import remotelog.api.segmentstore.v1.SegmentStore.IndexRange;
import remotelog.api.segmentstore.v1.SegmentStore.IndexType;

/**
 * Segment logs and indexes read by the URLs the store hands out (SegmentUrls), so their
 * bytes skip the store: a file:// URL from a filesystem store on this host (FileRanges),
 * a presigned GET from an S3 store (one hop, S3 to the broker). The top of one pipeline,
 * each layer calling only the one below:
 *
 * <pre>
 * UrlReader → ReadAhead (chunks, held ahead) → HedgedFetcher (a late GET asked twice)
 *           → ResumingReads (retries, resumes after a cut or a stall) → HttpRanges (GETs)
 * </pre>
 *
 * Without read-ahead a read goes straight to ResumingReads. A segment stored as chunks
 * (compressed, encrypted) is read so too, by the stored bytes of the chunks a range lies
 * in, and decoded above the pipeline (DecodingStream) with the chunk index and data key
 * the store handed out with its URLs. Where a read cannot start by
 * URL (a store that hands out none, a file this host cannot open, an endpoint it cannot
 * reach), open() answers null and the caller streams the bytes through FetchLogSegment,
 * which also says whether a segment is gone.
 */
public final class UrlReader {
    private static final Logger log = LoggerFactory.getLogger(UrlReader.class);

    private final long timeoutMs;
    private final SegmentUrls urls = new SegmentUrls();
    private final HttpRanges http;
    private final FileRanges files;
    private final ResumingReads resuming;
    private volatile boolean usedOnce;
    private HedgedFetcher hedging;
    private ReadAhead readAhead;

    /** Reads of `timeoutMs` at most each, retries included, file:// ones only beneath
     * `fileRoots`; `retried` counts each retry. */
    public UrlReader(long timeoutMs, List<String> fileRoots, Runnable retried) {
        this.timeoutMs = timeoutMs;
        this.files = new FileRanges(fileRoots);
        this.http = new HttpRanges(timeoutMs);
        this.resuming = new ResumingReads(http, timeoutMs, retried);
    }

    /**
     * From now on, logs read by HTTP(S) are read in chunks of `chunkBytes`, `ahead` of them
     * fetched ahead of each reader, `maxBytes` held at most (see ReadAhead), each chunk's
     * GET hedged past `hedgePercentile` of recent ones. `fetchedAhead` counts each chunk
     * asked for ahead, `hit` each a reader found held or on its way, `hedged` each hedge.
     */
    public synchronized void readAhead(
            int chunkBytes,
            int ahead,
            long maxBytes,
            double hedgePercentile,
            Runnable fetchedAhead,
            Runnable hit,
            Runnable hedged) {
        hedging = new HedgedFetcher(resuming, hedgePercentile, timeoutMs, hedged);
        readAhead = new ReadAhead(chunkBytes, ahead, maxBytes, timeoutMs, hedging, fetchedAhead, hit);
    }

    /**
     * Bytes `start`..`end` (inclusive; null: to the end) of the segment's log of `size`
     * bytes by its URL, asking `ask` for one where none is kept; null where the read must
     * take the stream.
     */
    public InputStream open(
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
    public InputStream openIndex(
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
    public void prepare(RemoteLogSegmentId segment, long size, Supplier<GetLogSegmentUrlResponse> ask) {
        if (!urls.usable()) {
            return;
        }
        SegmentUrls.Kept kept = urls.of(segment, size, ask);
        ReadAhead ahead = readAhead;
        if (kept == null || ahead == null || kept.isFile()) {
            return;
        }
        if (kept.indexes != null) {
            ahead.warm(kept.indexes, segment, true, kept.indexesSize());
        }
        ahead.warm(kept.log, segment, kept.logObjectSize(size));
    }

    private InputStream read(
            RemoteLogSegmentId segment,
            Supplier<GetLogSegmentUrlResponse> ask,
            IndexType index,
            long start,
            Long end,
            long size)
            throws RemoteResourceNotFoundException {
        if (!urls.usable()) {
            return null;
        }
        for (boolean renewed : new boolean[] {false, true}) {
            SegmentUrls.Kept kept = urls.of(segment, size, ask);
            if (kept == null) {
                return null;
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
                InputStream opened =
                        kept.chunked()
                                ? decoded(kept, url, segment, index, first, last, size)
                                : opened(kept, url, segment, index, first, last, size);
                if (opened == null) {
                    return null;
                }
                if (!usedOnce) {
                    usedOnce = true;
                    log.info("Reading segment logs from the {}: URLs the segment store hands out", url.getScheme());
                }
                return opened;
            } catch (HttpRanges.Refused e) {
                urls.forget(segment);
                if (renewed) {
                    return urls.pause(segment, e);
                }
            } catch (IOException e) {
                urls.forget(segment);
                return urls.pause(segment, e);
            }
        }
        return null;
    }

    /** Original bytes `first`..`last` of an object stored as chunks: the stored bytes of
     * the chunks they lie in, read as any object's, decoded; null for a range not in it
     * (the stream says what is wrong). */
    private InputStream decoded(
            SegmentUrls.Kept kept, URI url, RemoteLogSegmentId segment, IndexType index, long first, Long last, long size)
            throws IOException, RemoteResourceNotFoundException {
        ChunkIndex chunks = index == null ? kept.logChunks : kept.indexesChunks;
        long lastByte = Math.min(last == null ? Long.MAX_VALUE : last, chunks.originalSize() - 1);
        if (first > lastByte) {
            return null;
        }
        int firstChunk = chunks.chunkOf(first);
        int lastChunk = chunks.chunkOf(lastByte);
        InputStream stored =
                opened(kept, url, segment, index, chunks.storedFirst(firstChunk), chunks.storedLast(lastChunk), size);
        ChunkCodec.Kind kind = index == null ? ChunkCodec.Kind.LOG : ChunkCodec.Kind.INDEXES;
        return new DecodingStream(stored, kept.codec(segment, kind), chunks, first, lastByte);
    }

    /** The read, by the layer that serves it: a file, read-ahead chunks, or one GET. */
    private InputStream opened(
            SegmentUrls.Kept kept, URI url, RemoteLogSegmentId segment, IndexType index, long first, Long last, long size)
            throws IOException, RemoteResourceNotFoundException {
        ReadAhead ahead = readAhead;
        long logObject = kept.logObjectSize(size);
        if (ahead != null && index == IndexType.INDEX_TYPE_OFFSET && !kept.isFile()) {
            ahead.warm(kept.log, segment, logObject);
        }
        if ("file".equals(url.getScheme())) {
            return files.open(url, first, last);
        }
        if (ahead != null && index == null && logObject > 0) {
            return ahead.open(url, segment, false, logObject, first, last);
        }
        if (ahead != null && index != null) {
            return ahead.open(url, segment, true, kept.indexesSize(), first, last);
        }
        return resuming.open(url, segment, first, last);
    }

    /** Ends the HTTP client's threads; reads open now fail, later ones take the stream. */
    public synchronized void close() {
        urls.stop();
        if (readAhead != null) {
            readAhead.close();
        }
        if (hedging != null) {
            hedging.close();
        }
        resuming.close();
        http.close();
    }
}
