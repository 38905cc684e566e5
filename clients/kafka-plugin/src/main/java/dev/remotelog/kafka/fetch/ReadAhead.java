package dev.remotelog.kafka.fetch;

import dev.remotelog.kafka.util.BulkInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;

/**
 * Segment logs read from an object store in chunks, the next ones asked for before Kafka
 * wants them. Kafka opens a new stream for each remote fetch and reads about one fetch's
 * worth from it; each such read used to wait out the store's first-byte latency. Here a
 * read of chunk k of a segment starts ranged GETs for chunks k+1..k+ahead in the
 * background, so the partition's next fetch finds its bytes in memory.
 *
 * <p>Bounds: at most `ahead` chunks past the one being read per reader, and `maxBytes`
 * of chunks held or in flight across the broker; past that, no chunk is asked for ahead
 * and the oldest chunks are let go first. A chunk a reader asks for is always fetched,
 * so the bound can be passed by one chunk per reading thread (Kafka's
 * remote.log.reader.threads). A chunk nobody touches for IDLE_NANOS (its reader stopped,
 * or jumped elsewhere in the log) is dropped and its GET cancelled.
 */
public final class ReadAhead {
    static final long IDLE_NANOS = Duration.ofSeconds(30).toNanos();
    static final int THREADS = 16;

    /** A segment's object: its log, or its indexes (all of them in one object). */
    private static final class Blob {
        final RemoteLogSegmentId segment;
        final boolean indexes;

        Blob(RemoteLogSegmentId segment, boolean indexes) {
            this.segment = segment;
            this.indexes = indexes;
        }

        @Override
        public boolean equals(Object other) {
            return other instanceof Blob && ((Blob) other).segment.equals(segment) && ((Blob) other).indexes == indexes;
        }

        @Override
        public int hashCode() {
            return Objects.hash(segment, indexes);
        }

        @Override
        public String toString() {
            return segment + (indexes ? " (indexes)" : "");
        }
    }

    /** One chunk, fetched or on its way; `task` is set for one fetched ahead. */
    private static final class Chunk {
        final CompletableFuture<byte[]> bytes = new CompletableFuture<>();
        volatile Future<?> task;
        // Guarded by the ReadAhead: readers waiting on it (the one fetching it among them),
        // which keep it from being let go.
        int waiters;
        long touchedNanos = System.nanoTime();
    }

    private final int chunkBytes;
    private final int ahead;
    private final long maxBytes;
    private final long timeoutMs;
    private final long idleNanos;
    private final ChunkFetcher fetcher;
    private final Runnable fetchedAhead;
    private final Runnable hit;
    // By (object, chunk index); access order: the first entries are the ones let go first.
    private final LinkedHashMap<Map.Entry<Blob, Long>, Chunk> chunks = new LinkedHashMap<>(16, 0.75f, true);
    private ExecutorService threads;
    private boolean closed;

    /**
     * Chunks of `chunkBytes`, `ahead` of them fetched ahead of a reader, `maxBytes` held at
     * most; each GET lasts `timeoutMs` at most. `fetchedAhead` counts each chunk asked for
     * ahead, `hit` each chunk a reader found fetched or on its way.
     */
    ReadAhead(int chunkBytes, int ahead, long maxBytes, long timeoutMs, ChunkFetcher fetcher, Runnable fetchedAhead, Runnable hit) {
        this(chunkBytes, ahead, maxBytes, timeoutMs, IDLE_NANOS, fetcher, fetchedAhead, hit);
    }

    /** As above, chunks untouched for `idleNanos` let go. */
    ReadAhead(
            int chunkBytes,
            int ahead,
            long maxBytes,
            long timeoutMs,
            long idleNanos,
            ChunkFetcher fetcher,
            Runnable fetchedAhead,
            Runnable hit) {
        this.chunkBytes = chunkBytes;
        this.ahead = ahead;
        this.maxBytes = maxBytes;
        this.timeoutMs = timeoutMs;
        this.idleNanos = idleNanos;
        this.fetcher = fetcher;
        this.fetchedAhead = fetchedAhead;
        this.hit = hit;
    }

    /**
     * Bytes `start`..`end` (inclusive; null: to the end) of the segment's log (or, if
     * `indexes`, its indexes object) of `size` bytes at `url`. The first chunk is read
     * before this returns, so a URL the store refuses or an object that is gone fails
     * here, where the caller can still take the stream. A segment's indexes are read by
     * Kafka one after the other: the first read's chunk holds the others, or their GETs
     * are on their way.
     */
    InputStream open(URI url, RemoteLogSegmentId segment, boolean indexes, long size, long start, Long end)
            throws IOException, RemoteResourceNotFoundException {
        long last = end == null ? size - 1 : Math.min(end, size - 1);
        Reader reader = new Reader(url, new Blob(segment, indexes), size, start, last);
        if (start <= last) {
            reader.load();
        }
        return reader;
    }

    /**
     * Asks, in the background, for the first chunk of the segment's log of `size` bytes at
     * `url`: Kafka reads a segment's offset index just before its first fetch from the
     * segment, and a reader going through the partition in order starts that fetch at byte
     * 0. So that chunk's GET runs beside the indexes' instead of after them. A reader that
     * starts elsewhere leaves the chunk to be let go as any other unread one.
     */
    void warm(URI url, RemoteLogSegmentId segment, long size) {
        warm(url, segment, false, size);
    }

    /** As above, the first chunk of the segment's log or (`indexes`) of its indexes. */
    void warm(URI url, RemoteLogSegmentId segment, boolean indexes, long size) {
        if (size > 0) {
            fetchAhead(url, new Blob(segment, indexes), 0, 0, size);
        }
    }

    private final class Reader extends BulkInputStream {
        private final URI url;
        private final Blob blob;
        private final long size;
        private final long last;
        private long position;
        private byte[] current = new byte[0];
        private long currentStart;

        Reader(URI url, Blob blob, long size, long start, long last) {
            this.url = url;
            this.blob = blob;
            this.size = size;
            this.position = start;
            this.last = last;
        }

        /** Makes `current` the chunk holding `position`, asking for the next ones ahead. */
        void load() throws IOException, RemoteResourceNotFoundException {
            long index = position / chunkBytes;
            current = chunk(url, blob, index, size, true);
            currentStart = index * chunkBytes;
            if (position - currentStart >= current.length) {
                throw new java.io.EOFException(blob + ": it ends at byte " + (currentStart + current.length) + ", not " + size);
            }
            fetchAhead(url, blob, index + 1, index + ahead, size);
        }

        @Override
        public int read(byte[] buffer, int from, int length) throws IOException {
            if (position > last) {
                return -1;
            }
            if (length == 0) {
                return 0;
            }
            if (position - currentStart >= current.length) {
                try {
                    load();
                } catch (RemoteResourceNotFoundException gone) {
                    throw new IOException(blob + ": its object went while it was read", gone);
                }
            }
            int offset = (int) (position - currentStart);
            int count = (int) Math.min(Math.min(length, current.length - offset), last - position + 1);
            System.arraycopy(current, offset, buffer, from, count);
            position += count;
            return count;
        }

        @Override
        public void close() {
            current = new byte[0];
            position = last + 1;
        }
    }

    /**
     * Chunk `index` of the segment: found, awaited, or fetched by the calling thread.
     * One another thread fetched that failed is fetched again by this one, if `again`.
     */
    private byte[] chunk(URI url, Blob blob, long index, long size, boolean again)
            throws IOException, RemoteResourceNotFoundException {
        Map.Entry<Blob, Long> key = Map.entry(blob, index);
        Chunk chunk;
        boolean mine = false;
        synchronized (this) {
            dropIdle();
            chunk = chunks.get(key);
            if (chunk == null || chunk.bytes.isCompletedExceptionally()) {
                chunk = new Chunk();
                chunks.put(key, chunk);
                mine = true;
            }
            chunk.touchedNanos = System.nanoTime();
            chunk.waiters++;
        }
        if (mine) {
            fill(chunk, key, url, index, size);
        } else {
            hit.run();
        }
        try {
            return await(chunk, key);
        } catch (IOException | RemoteResourceNotFoundException e) {
            if (mine || !again || e instanceof InterruptedIOException) {
                throw e;
            }
        } finally {
            synchronized (this) {
                chunk.waiters--;
                chunk.touchedNanos = System.nanoTime();
            }
        }
        return chunk(url, blob, index, size, false); // a GET asked for ahead failed
    }

    private byte[] await(Chunk chunk, Map.Entry<Blob, Long> key) throws IOException, RemoteResourceNotFoundException {
        Blob segment = key.getKey();
        long index = key.getValue();
        try {
            return chunk.bytes.get(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while reading " + segment);
        } catch (TimeoutException e) {
            throw new IOException(segment + ": chunk " + index + " did not come in " + timeoutMs + " ms");
        } catch (CancellationException e) {
            throw new IOException(segment + ": chunk " + index + " was let go while it was read");
        } catch (ExecutionException e) {
            forget(key, chunk);
            Throwable cause = e.getCause();
            if (cause instanceof RemoteResourceNotFoundException) {
                throw (RemoteResourceNotFoundException) cause;
            }
            if (cause instanceof IOException) {
                throw (IOException) cause;
            }
            throw new IOException(segment + ": chunk " + index + " failed", cause);
        }
    }

    private void fill(Chunk chunk, Map.Entry<Blob, Long> key, URI url, long index, long size) {
        long first = index * chunkBytes;
        long last = Math.min(first + chunkBytes, size) - 1;
        try {
            chunk.bytes.complete(fetcher.fetch(url, key.getKey().segment, first, last));
        } catch (IOException | RemoteResourceNotFoundException | RuntimeException e) {
            chunk.bytes.completeExceptionally(e);
        }
    }

    /** Asks for chunks `from`..`to` that are neither held nor on their way, within the bounds. */
    private void fetchAhead(URI url, Blob blob, long from, long to, long size) {
        long chunksInLog = (size + chunkBytes - 1) / chunkBytes;
        List<Runnable> started = new ArrayList<>();
        synchronized (this) {
            if (closed) {
                return;
            }
            for (long next = from; next <= to && next < chunksInLog; next++) {
                Map.Entry<Blob, Long> key = Map.entry(blob, next);
                if (chunks.containsKey(key)) {
                    continue;
                }
                if (!makeRoom(blob, from - 1, to)) {
                    break;
                }
                Chunk chunk = new Chunk();
                chunks.put(key, chunk);
                long wanted = next;
                chunk.task = executor().submit(() -> fill(chunk, key, url, wanted, size));
                started.add(fetchedAhead);
            }
        }
        started.forEach(Runnable::run);
    }

    /**
     * True once one more chunk fits in maxBytes, after letting go of the oldest ones no
     * reader waits on, other than chunks `from`..`to` of `blob`: the reader's own.
     */
    private boolean makeRoom(Blob blob, long from, long to) {
        Iterator<Map.Entry<Map.Entry<Blob, Long>, Chunk>> oldest = chunks.entrySet().iterator();
        while ((long) (chunks.size() + 1) * chunkBytes > maxBytes && oldest.hasNext()) {
            Map.Entry<Map.Entry<Blob, Long>, Chunk> entry = oldest.next();
            Map.Entry<Blob, Long> key = entry.getKey();
            boolean own = key.getKey().equals(blob) && key.getValue() >= from && key.getValue() <= to;
            if (!own && entry.getValue().waiters == 0) {
                cancel(entry.getValue());
                oldest.remove();
            }
        }
        return (long) (chunks.size() + 1) * chunkBytes <= maxBytes;
    }

    private void dropIdle() {
        long now = System.nanoTime();
        chunks.values().removeIf(chunk -> {
            boolean idle = chunk.waiters == 0 && now - chunk.touchedNanos > idleNanos;
            if (idle) {
                cancel(chunk);
            }
            return idle;
        });
    }

    private static void cancel(Chunk chunk) {
        Future<?> task = chunk.task;
        if (task != null) {
            task.cancel(true);
        }
        chunk.bytes.cancel(false); // a reader waiting on it is told, not left to time out
    }

    private synchronized void forget(Map.Entry<Blob, Long> key, Chunk chunk) {
        chunks.remove(key, chunk);
    }

    private synchronized ExecutorService executor() {
        if (threads == null) {
            threads =
                    Executors.newFixedThreadPool(
                            THREADS,
                            task -> {
                                Thread thread = new Thread(task, "remotelog-read-ahead");
                                thread.setDaemon(true);
                                return thread;
                            });
        }
        return threads;
    }

    /** Chunks held now, fetched or on their way. */
    synchronized int held() {
        return chunks.size();
    }

    /** Lets go of every chunk and ends the fetching threads. */
    synchronized void close() {
        closed = true;
        chunks.values().forEach(ReadAhead::cancel);
        chunks.clear();
        if (threads != null) {
            threads.shutdownNow();
            threads = null;
        }
    }
}
