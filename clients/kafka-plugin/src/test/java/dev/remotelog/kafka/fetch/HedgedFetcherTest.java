package dev.remotelog.kafka.fetch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.URI;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

public class HedgedFetcherTest {
    static final URI URL = URI.create("http://127.0.0.1:1/log");
    static final RemoteLogSegmentId SEGMENT =
            new RemoteLogSegmentId(
                    new TopicIdPartition(Uuid.randomUuid(), new TopicPartition("orders", 0)), Uuid.randomUuid());

    final AtomicInteger gets = new AtomicInteger();
    final AtomicInteger hedged = new AtomicInteger();
    // The GET of this number (from 1) waits on `released`, as a request stuck on one server.
    int stuck = -1;
    final CountDownLatch released = new CountDownLatch(1);
    // The GETs from this number on fail, as for a deleted object.
    int goneFrom = Integer.MAX_VALUE;
    // The GETs from this number on take 20 ms, as on a link every GET waits on.
    volatile int slowFrom = Integer.MAX_VALUE;
    HedgedFetcher fetcher;

    HedgedFetcher fetcher(double percentile) {
        fetcher =
                new HedgedFetcher(
                        (url, segment, first, last) -> {
                            int number = gets.incrementAndGet();
                            if (number >= goneFrom) {
                                throw new RemoteResourceNotFoundException("gone");
                            }
                            if (number >= slowFrom) {
                                try {
                                    Thread.sleep(20);
                                } catch (InterruptedException e) {
                                    Thread.currentThread().interrupt();
                                }
                            }
                            if (number == stuck) {
                                try {
                                    released.await(30, TimeUnit.SECONDS);
                                } catch (InterruptedException e) {
                                    Thread.currentThread().interrupt();
                                }
                                return new byte[] {(byte) 0xee};
                            }
                            return new byte[] {(byte) number};
                        },
                        percentile,
                        10_000,
                        hedged::incrementAndGet);
        return fetcher;
    }

    @AfterEach
    void stop() {
        released.countDown();
        fetcher.close();
    }

    void warm(HedgedFetcher hedging) throws Exception {
        for (int i = 0; i < HedgedFetcher.BEFORE_HEDGING; i++) {
            hedging.fetch(URL, SEGMENT, 0, 0);
        }
    }

    @Test
    void whenEveryGetIsLateFewAreHedgedAndTheThresholdFollowsThem() throws Exception {
        HedgedFetcher hedging = fetcher(95);
        warm(hedging);
        long before = hedging.hedgeAfterNanos();
        slowFrom = gets.get() + 1;
        int fetches = 60;
        for (int i = 0; i < fetches; i++) {
            hedging.fetch(URL, SEGMENT, 0, 0);
        }
        // The budget, then one in twenty: not every GET asked twice.
        assertTrue(hedged.get() <= HedgedFetcher.BUDGET_MAX + fetches * HedgedFetcher.BUDGET_PER_GET, hedged + " hedged");
        assertTrue(hedged.get() >= 1);
        // The late GETs were samples: the threshold rose to them instead of staying under them.
        assertTrue(hedging.hedgeAfterNanos() >= TimeUnit.MILLISECONDS.toNanos(20), "threshold " + hedging.hedgeAfterNanos());
        assertTrue(hedging.hedgeAfterNanos() > before);
    }

    @Test
    void aLateGetIsAskedAgainAndTheFirstAnswerWins() throws Exception {
        HedgedFetcher hedging = fetcher(95);
        assertNull(hedging.hedgeAfterNanos()); // too few GETs known to tell late from usual
        warm(hedging);
        stuck = HedgedFetcher.BEFORE_HEDGING + 1;
        byte[] answer = hedging.fetch(URL, SEGMENT, 0, 0);
        // The hedge, GET number 22, answered while the stuck one waited.
        assertArrayEquals(new byte[] {(byte) (HedgedFetcher.BEFORE_HEDGING + 2)}, answer);
        assertEquals(1, hedged.get());
    }

    @Test
    void withPercentileZeroNoGetIsHedged() throws Exception {
        HedgedFetcher hedging = fetcher(0);
        warm(hedging);
        assertNull(hedging.hedgeAfterNanos());
        assertArrayEquals(new byte[] {(byte) (HedgedFetcher.BEFORE_HEDGING + 1)}, hedging.fetch(URL, SEGMENT, 0, 0));
        assertEquals(0, hedged.get());
    }

    @Test
    void anObjectGoneForBothGetsIsNotFound() throws Exception {
        HedgedFetcher hedging = fetcher(95);
        warm(hedging);
        goneFrom = HedgedFetcher.BEFORE_HEDGING + 1;
        assertThrows(RemoteResourceNotFoundException.class, () -> hedging.fetch(URL, SEGMENT, 0, 0));
    }
}
