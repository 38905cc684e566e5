package dev.remotelog.kafka.fetch;

import dev.remotelog.kafka.util.BulkInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * HTTP answer bodies whose reads cannot wait for ever. java.net.http bounds only the wait
 * for an answer's headers (HttpRequest.timeout); a body's InputStream has no read
 * timeout, so an object store that stops sending mid-body would hold the reading thread
 * (one of Kafka's remote-log-reader threads) for good. One daemon thread closes any body
 * whose read has waited longer than the bound, which ends that read with an IOException
 * that the reader's retry (from the byte where it stopped) or its caller sees.
 */
public final class StalledReads implements AutoCloseable {
    private final long boundNanos;
    private final Set<Watched> reading = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService checker =
            Executors.newSingleThreadScheduledExecutor(
                    task -> {
                        Thread thread = new Thread(task, "remotelog-stalled-reads");
                        thread.setDaemon(true);
                        return thread;
                    });

    StalledReads(long boundMs) {
        this.boundNanos = TimeUnit.MILLISECONDS.toNanos(boundMs);
        long every = Math.max(10, boundMs / 4);
        checker.scheduleWithFixedDelay(this::check, every, every, TimeUnit.MILLISECONDS);
    }

    long boundMs() {
        return TimeUnit.NANOSECONDS.toMillis(boundNanos);
    }

    /** `body`, each read of it ended by closing it once it has waited past the bound. */
    InputStream watch(InputStream body) {
        return new Watched(body);
    }

    private void check() {
        long now = System.nanoTime();
        for (Watched read : reading) {
            try {
                read.endIfStalled(now);
            } catch (RuntimeException e) {
                // one body's close failing must not end the checks of the others
            }
        }
    }

    @Override
    public void close() {
        checker.shutdownNow();
    }

    private final class Watched extends BulkInputStream {
        private final InputStream in;
        private volatile long since; // when the read under way began
        private volatile boolean stalled;

        Watched(InputStream in) {
            this.in = in;
        }

        void endIfStalled(long now) {
            if (reading.contains(this) && now - since > boundNanos) {
                stalled = true;
                reading.remove(this);
                try {
                    in.close();
                } catch (IOException ignored) {
                    // closed is all that was wanted
                }
            }
        }

        @Override
        public int read(byte[] buffer, int from, int length) throws IOException {
            if (stalled) {
                throw stall(null);
            }
            since = System.nanoTime();
            reading.add(this);
            try {
                return in.read(buffer, from, length);
            } catch (IOException e) {
                throw stalled ? stall(e) : e;
            } finally {
                reading.remove(this);
            }
        }

        private IOException stall(IOException cause) {
            return new IOException("the object store sent nothing for " + boundMs() + " ms", cause);
        }

        @Override
        public void close() throws IOException {
            reading.remove(this);
            in.close();
        }
    }
}
