package dev.remotelog.kafka.fetch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The read-ahead's bounds and reuse, over a fetcher that serves a log from memory and
 * records each range asked for; the HTTP path is StorageManagerTest's. */
public class ReadAheadTest {
    static final int CHUNK = 1000;
    static final URI URL = URI.create("http://store.invalid/log");
    static final TopicIdPartition PARTITION = new TopicIdPartition(Uuid.randomUuid(), new TopicPartition("t", 0));

    final byte[] log = new byte[CHUNK * 10 + 300];
    // First bytes of the ranges asked for, in order.
    final List<Long> asked = new ArrayList<>();
    // Ranges from these first bytes wait for `release` (or an interrupt) before answering.
    final Set<Long> held = ConcurrentHashMap.newKeySet();
    final CountDownLatch release = new CountDownLatch(1);
    final AtomicInteger interrupted = new AtomicInteger();
    // Ranges from these first bytes fail once.
    final Set<Long> failing = ConcurrentHashMap.newKeySet();
    final AtomicInteger fetchedAhead = new AtomicInteger();
    final AtomicInteger hits = new AtomicInteger();
    final List<ReadAhead> made = new ArrayList<>();

    ReadAheadTest() {
        new java.util.Random(7).nextBytes(log);
    }

    ReadAhead readAhead(int ahead, long maxBytes, long idleNanos) {
        ReadAhead readAhead =
                new ReadAhead(
                        CHUNK,
                        ahead,
                        maxBytes,
                        10_000,
                        idleNanos,
                        (url, segment, first, last) -> {
                            synchronized (asked) {
                                asked.add(first);
                                asked.notifyAll();
                            }
                            if (held.contains(first)) {
                                try {
                                    release.await();
                                } catch (InterruptedException e) {
                                    interrupted.incrementAndGet();
                                    throw new java.io.InterruptedIOException("let go");
                                }
                            }
                            if (failing.remove(first)) {
                                throw new IOException("HTTP 500 to a ranged GET");
                            }
                            return Arrays.copyOfRange(log, (int) first, (int) Math.min(last + 1, log.length));
                        },
                        fetchedAhead::incrementAndGet,
                        hits::incrementAndGet);
        made.add(readAhead);
        return readAhead;
    }

    @AfterEach
    void close() {
        made.forEach(ReadAhead::close);
    }

    static RemoteLogSegmentId segment() {
        return new RemoteLogSegmentId(PARTITION, Uuid.randomUuid());
    }

    /** Waits until `count` ranges were asked for; their first bytes, sorted. */
    List<Long> askedOnce(int count) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        synchronized (asked) {
            while (asked.size() < count && System.nanoTime() < deadline) {
                asked.wait(100);
            }
            List<Long> sorted = new ArrayList<>(asked);
            sorted.sort(null);
            return sorted;
        }
    }

    /** `length` bytes from `start`, as Kafka reads one fetch's worth, then closed. */
    byte[] fetch(ReadAhead readAhead, RemoteLogSegmentId segment, long start, int length) throws Exception {
        try (InputStream in = readAhead.open(URL, segment, false, log.length, start, null)) {
            return in.readNBytes(length);
        }
    }

    @Test
    void sequentialFetchesFindTheChunksAskedForAheadAndEachChunkIsAskedForOnce() throws Exception {
        ReadAhead readAhead = readAhead(2, 1 << 20, ReadAhead.IDLE_NANOS);
        RemoteLogSegmentId segment = segment();
        // Fetches as Kafka makes them: each starts a little before where the last stopped.
        long position = 0;
        while (position < log.length) {
            byte[] got = fetch(readAhead, segment, position, 1500);
            assertArrayEquals(Arrays.copyOfRange(log, (int) position, (int) Math.min(position + 1500, log.length)), got);
            position += 1400;
        }
        List<Long> ranges = askedOnce(11);
        List<Long> chunks = new ArrayList<>();
        for (long first = 0; first < log.length; first += CHUNK) {
            chunks.add(first);
        }
        assertEquals(chunks, ranges); // every chunk once, none past the log's end
        assertEquals(10, fetchedAhead.get()); // all but the first were asked for ahead
        assertTrue(hits.get() >= 10, "hits: " + hits.get());
    }

    @Test
    void aReaderAsksForAtMostItsChunksAheadAndTheBrokerAtMostMaxBytes() throws Exception {
        held.addAll(List.of(1000L, 2000L, 3000L, 4000L, 5000L, 6000L, 7000L));
        ReadAhead wide = readAhead(3, 100 * CHUNK, ReadAhead.IDLE_NANOS);
        assertArrayEquals(Arrays.copyOfRange(log, 0, 10), fetch(wide, segment(), 0, 10));
        assertEquals(List.of(0L, 1000L, 2000L, 3000L), askedOnce(4));
        Thread.sleep(200); // a fifth would come now, if the bound let it
        assertEquals(4, askedOnce(4).size());

        asked.clear();
        ReadAhead narrow = readAhead(8, 3 * CHUNK, ReadAhead.IDLE_NANOS);
        assertArrayEquals(Arrays.copyOfRange(log, 0, 10), fetch(narrow, segment(), 0, 10));
        assertEquals(List.of(0L, 1000L, 2000L), askedOnce(3));
        Thread.sleep(200);
        assertEquals(3, askedOnce(3).size());
        assertEquals(3, narrow.held());
    }

    @Test
    void chunksNobodyTouchesAreLetGoAndTheirGetsCancelled() throws Exception {
        held.addAll(List.of(1000L, 2000L));
        ReadAhead readAhead = readAhead(2, 1 << 20, 0);
        fetch(readAhead, segment(), 0, 10); // the reader stops here
        assertEquals(List.of(0L, 1000L, 2000L), askedOnce(3));
        // The next read, of another segment, finds them idle.
        byte[] other = fetch(readAhead, segment(), 9000, 10);
        assertArrayEquals(Arrays.copyOfRange(log, 9000, 9010), other);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (interrupted.get() < 2 && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertEquals(2, interrupted.get());
    }

    @Test
    void aChunkOnItsWayIsAwaitedAndAFailedOneAskedForAgain() throws Exception {
        ReadAhead readAhead = readAhead(1, 1 << 20, ReadAhead.IDLE_NANOS);
        RemoteLogSegmentId segment = segment();
        held.add(1000L);
        failing.add(2000L);
        fetch(readAhead, segment, 0, 10);
        assertEquals(List.of(0L, 1000L), askedOnce(2));
        // A reader of chunk 1 waits for the GET already on its way, then finds chunk 2's
        // ahead GET failed and asks again.
        Thread reader =
                new Thread(
                        () -> {
                            try {
                                assertArrayEquals(Arrays.copyOfRange(log, 1500, 2600), fetch(readAhead, segment, 1500, 1100));
                            } catch (Exception e) {
                                throw new AssertionError(e);
                            }
                        });
        AtomicInteger failures = new AtomicInteger();
        reader.setUncaughtExceptionHandler((thread, e) -> failures.incrementAndGet());
        reader.start();
        Thread.sleep(100);
        release.countDown();
        reader.join(10_000);
        assertEquals(0, failures.get());
        assertEquals(List.of(0L, 1000L, 2000L, 2000L, 3000L), askedOnce(5));
    }

    @Test
    void aLogShorterThanItsMetadataSaysIsAnErrorNotAShortRead() throws Exception {
        ReadAhead readAhead = readAhead(1, 1 << 20, ReadAhead.IDLE_NANOS);
        try (InputStream in = readAhead.open(URL, segment(), false, log.length + 5000, 9500, null)) {
            assertArrayEquals(Arrays.copyOfRange(log, 9500, log.length), in.readNBytes(log.length - 9500));
            assertThrows(java.io.EOFException.class, in::read);
        }
    }
}
