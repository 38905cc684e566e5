package dev.remotelog.kafka.fetch;

import dev.remotelog.kafka.util.DaemonThreads;
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
public final class HedgedFetcher implements ChunkFetcher {
    static final int KEPT = 256;
    static final int BEFORE_HEDGING = 20;
    // Hedges come from a budget each GET adds to: one GET in 20 at most, over time, and
    // no more than BUDGET_MAX in a burst.
    static final double BUDGET_PER_GET = 0.05;
    static final double BUDGET_MAX = 10;

    private final ChunkFetcher fetcher;
    private final double percentile;
    private final long timeoutMs;
    private final Runnable hedged;
    // GETs under way at once on the plugin's threads; past that, a GET runs on its
    // reader's thread (and is not hedged), so a stalled store cannot grow the pool.
    static final int MAX_THREADS = 32;

    private final ExecutorService threads = DaemonThreads.bounded("remotelog-hedged-gets", MAX_THREADS);
    // The last KEPT GETs' times, a ring; guarded by this.
    private final long[] nanos = new long[KEPT];
    private int samples;
    private double budget = BUDGET_MAX;

    /** `fetcher`'s GETs hedged past `percentile` (0: never) of recent ones, each waited on
     * for `timeoutMs` at most; `hedged` counts each GET asked a second time. */
    HedgedFetcher(ChunkFetcher fetcher, double percentile, long timeoutMs, Runnable hedged) {
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
            // The first GET's time is a sample however it ends, won or lost: kept only
            // when under the threshold, the samples would pull it down, past the slow
            // tail, until nearly every GET was asked twice.
            primary.whenComplete((bytes, failure) -> record(System.nanoTime() - started));
            if (!spendHedge()) {
                return awaited(primary, started, segment, first, last);
            }
            hedged.run();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while reading " + segment);
        } catch (ExecutionException e) {
            throw unwrapped(e.getCause(), segment);
        }
        // The hedge's own time is not a sample: it was asked for because the first was late.
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
        return awaited(answer, started, segment, first, last);
    }

    /** `answer`'s bytes, waited on until the read's deadline, counted from `started`. */
    private byte[] awaited(
            CompletableFuture<byte[]> answer, long started, RemoteLogSegmentId segment, long first, long last)
            throws IOException, RemoteResourceNotFoundException {
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
        budget = Math.min(BUDGET_MAX, budget + BUDGET_PER_GET);
    }

    /** Whether a hedge may be asked for now (taking it from the budget): a link every
     * GET waits on makes every GET late, and hedging them all would slow it further. */
    private synchronized boolean spendHedge() {
        if (budget < 1) {
            return false;
        }
        budget -= 1;
        return true;
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
