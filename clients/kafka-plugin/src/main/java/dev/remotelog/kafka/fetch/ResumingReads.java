package dev.remotelog.kafka.fetch;

import dev.remotelog.kafka.util.BulkInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;

/**
 * Ranged reads over HttpRanges that outlast a busy store and a cut connection. A GET
 * answered SlowDown or a gateway error asks again; a body cut off midway, or stalled for
 * a third of the deadline (StalledReads), asks again from the byte where it stopped: after
 * a pause from 50 ms doubling to 1 s, until the read's deadline. Then the failure is the
 * caller's. As a ChunkFetcher it reads one chunk whole, for the hedging layer above.
 */
public final class ResumingReads implements ChunkFetcher {
    static final long FIRST_RETRY_NANOS = Duration.ofMillis(50).toNanos();
    static final long LAST_RETRY_NANOS = Duration.ofSeconds(1).toNanos();

    private final HttpRanges source;
    private final long timeoutMs;
    private final Runnable retried;
    // A third of a read's deadline: a body stalled that long is asked again from the byte
    // where it stopped, with time left for the new GET to answer.
    private final StalledReads stalls;

    /** Reads of `timeoutMs` at most each, retries included; `retried` counts each retry. */
    ResumingReads(HttpRanges source, long timeoutMs, Runnable retried) {
        this.source = source;
        this.timeoutMs = timeoutMs;
        this.retried = retried;
        this.stalls = new StalledReads(Math.max(50, timeoutMs / 3));
    }

    /** Bytes `start`..`end` (null: to the end) of `url`, the first GET answered already. */
    InputStream open(URI url, RemoteLogSegmentId segment, long start, Long end)
            throws IOException, RemoteResourceNotFoundException {
        Resuming read = new Resuming(url, segment, start, end, System.nanoTime() + timeoutMs * 1_000_000);
        read.open(null);
        return read;
    }

    @Override
    public byte[] fetch(URI url, RemoteLogSegmentId segment, long first, long last)
            throws IOException, RemoteResourceNotFoundException {
        try (InputStream in = open(url, segment, first, last)) {
            return in.readAllBytes();
        }
    }

    void close() {
        stalls.close();
    }

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
                    HttpResponse<InputStream> response = source.get(url, segment, position, end);
                    Long covered = HttpRanges.lastByte(response);
                    if (end == null || (covered != null && covered < end)) {
                        end = covered; // an object that ends before the range asked for
                    }
                    in = stalls.watch(response.body());
                    return;
                } catch (HttpRanges.Unavailable e) {
                    failure = e;
                } catch (HttpRanges.Refused e) {
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
}
