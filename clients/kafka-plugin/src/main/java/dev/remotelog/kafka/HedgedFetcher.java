package dev.remotelog.kafka;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.URI;
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;

/**
 * Read-ahead chunks fetched with hedging: a GET that takes longer than `percentile` of
 * the last GETs' times (once there are enough of them) is asked a second time, and the
 * first answer wins. Object storage's slowest requests are slow on one server; a second
 * request is served by another. The loser is left to finish in the background (its bytes
 * are one chunk at most, its time the read's deadline at most) and is dropped.
 */
final class HedgedFetcher implements ReadAhead.Fetcher {
    static final int KEPT = 256;
    static final int BEFORE_HEDGING = 20;

    private final ReadAhead.Fetcher fetcher;
    private final double percentile;
    private final long timeoutMs;
    private final Runnable hedged;
    private final ExecutorService threads = DaemonThreads.cached("remotelog-hedged-gets");
    // The last KEPT GETs' times, a ring; guarded by this.
    private final long[] nanos = new long[KEPT];
    private int samples;

    /** `fetcher`'s GETs hedged past `percentile` (0: never) of recent ones, each waited on
     * for `timeoutMs` at most; `hedged` counts each GET asked a second time. */
    HedgedFetcher(ReadAhead.Fetcher fetcher, double percentile, long timeoutMs, Runnable hedged) {
        this.fetcher = fetcher;
        this.percentile = percentile;
        this.timeoutMs = timeoutMs;
        this.hedged = hedged;
    }

    @Override
    public byte[] fetch(URI url, RemoteLogSegmentId segment, long first, long last)
            throws IOException, RemoteResourceNotFoundException {
        long started = System.nanoTime();
        Long hedgeAfter = hedgeAfterNanos();
        if (hedgeAfter == null) {
            byte[] bytes = fetcher.fetch(url, segment, first, last);
            record(System.nanoTime() - started);
            return bytes;
        }
        CompletableFuture<byte[]> primary = start(url, segment, first, last);
        try {
            byte[] bytes = primary.get(hedgeAfter, TimeUnit.NANOSECONDS);
            record(System.nanoTime() - started);
            return bytes;
        } catch (TimeoutException late) {
            hedged.run();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while reading " + segment);
        } catch (ExecutionException e) {
            throw unwrapped(e.getCause(), segment);
        }
        // A hedged GET's time is not a sample: it was chosen for being late.
        CompletableFuture<byte[]> hedge = start(url, segment, first, last);
        CompletableFuture<byte[]> answer = new CompletableFuture<>();
        AtomicInteger failed = new AtomicInteger();
        for (CompletableFuture<byte[]> get : Arrays.asList(primary, hedge)) {
            get.whenComplete(
                    (bytes, failure) -> {
                        if (failure == null) {
                            answer.complete(bytes);
                        } else if (failed.incrementAndGet() == 2) {
                            answer.completeExceptionally(failure);
                        }
                    });
        }
        try {
            long left = TimeUnit.MILLISECONDS.toNanos(timeoutMs) - (System.nanoTime() - started);
            return answer.get(Math.max(1, left), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while reading " + segment);
        } catch (TimeoutException e) {
            throw new IOException(segment + ": bytes " + first + ".." + last + " did not come in " + timeoutMs + " ms");
        } catch (ExecutionException e) {
            throw unwrapped(e.getCause(), segment);
        }
    }

    private CompletableFuture<byte[]> start(URI url, RemoteLogSegmentId segment, long first, long last) {
        return CompletableFuture.supplyAsync(
                () -> {
                    try {
                        return fetcher.fetch(url, segment, first, last);
                    } catch (IOException | RemoteResourceNotFoundException e) {
                        throw new CompletionException(e);
                    }
                },
                threads);
    }

    private static IOException unwrapped(Throwable cause, RemoteLogSegmentId segment)
            throws RemoteResourceNotFoundException {
        while (cause instanceof CompletionException && cause.getCause() != null) {
            cause = cause.getCause();
        }
        if (cause instanceof RemoteResourceNotFoundException) {
            throw (RemoteResourceNotFoundException) cause;
        }
        return cause instanceof IOException ? (IOException) cause : new IOException(segment + ": a GET failed", cause);
    }

    private synchronized void record(long elapsedNanos) {
        nanos[samples % KEPT] = elapsedNanos;
        samples++;
    }

    /** How long a GET runs before it is hedged; null while too few are known, or never. */
    synchronized Long hedgeAfterNanos() {
        if (percentile <= 0 || samples < BEFORE_HEDGING) {
            return null;
        }
        long[] known = Arrays.copyOf(nanos, Math.min(samples, KEPT));
        Arrays.sort(known);
        return known[Math.min(known.length - 1, (int) (known.length * percentile / 100))];
    }

    void close() {
        threads.shutdownNow();
    }
}
