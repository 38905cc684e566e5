package dev.remotelog.kafka.util;

import org.slf4j.Logger;

/**
 * A WARN that repeats while an outage lasts (each task run of each partition may hit it),
 * logged at most once an interval, with how many were left out since the last.
 */
public final class Warnings {
    private final Logger log;
    private final long intervalNanos;
    private long lastNanos;
    private boolean logged;
    private long suppressed;

    public Warnings(Logger log, long intervalNanos) {
        this.log = log;
        this.intervalNanos = intervalNanos;
    }

    /** Logs `message` unless one was logged within the interval; whether it was logged. */
    public synchronized boolean warn(String message) {
        long now = System.nanoTime();
        if (logged && now - lastNanos < intervalNanos) {
            suppressed++;
            return false;
        }
        if (suppressed > 0) {
            log.warn("{} ({} more like it left out since the last)", message, suppressed);
        } else {
            log.warn("{}", message);
        }
        logged = true;
        lastNanos = now;
        suppressed = 0;
        return true;
    }
}
