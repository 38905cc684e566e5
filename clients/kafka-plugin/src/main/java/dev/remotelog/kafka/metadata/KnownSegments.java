package dev.remotelog.kafka.metadata;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;

/**
 * What the metadata manager said of a partition's segments that stays true until its
 * metadata is written: which segment holds an offset of an epoch (Kafka asks before each
 * remote fetch), and the listings Kafka's copy and expiration tasks ask for each run of
 * each partition (an idle one's is empty, run after run). A recovery writes a partition
 * while it is not ready: a "not ready" answer forgets the partition too.
 *
 * <p>Only the partition's leader writes its segment metadata, through this plugin, so a
 * write here forgets the partition, before it is sent and once it is applied; so does a
 * change of leadership. Whatever else might write (an operator's tool, or the leader on
 * another broker, for a partition this one follows) is bounded by how long anything is
 * kept: LEADER_KEPT_NANOS for a partition this broker leads, KEPT_NANOS otherwise, as
 * Kafka's own topic-based RLMM answers from a cache its consumer updates.
 */
public final class KnownSegments {
    static final long KEPT_NANOS = TimeUnit.SECONDS.toNanos(30);
    static final long LEADER_KEPT_NANOS = TimeUnit.MINUTES.toNanos(5);
    static final int SEGMENTS_KEPT = 64;
    // A listing of more segments is not kept: memory stays bounded by partitions.
    static final int LISTING_KEPT = 256;
    // The key of a listing of every epoch.
    private static final int ALL_EPOCHS = Integer.MIN_VALUE;

    /** One partition's answers, from `sinceNanos`; dropped whole when it is written. */
    private static final class Known {
        final long sinceNanos = System.nanoTime();
        final Deque<RemoteLogSegmentMetadata> segments = new ArrayDeque<>();
        // Epoch (ALL_EPOCHS: any) -> its listing, as the service answered it.
        final Map<Integer, List<RemoteLogSegmentMetadata>> listings = new HashMap<>();
    }

    private final ConcurrentHashMap<TopicIdPartition, Known> partitions = new ConcurrentHashMap<>();
    private final Set<TopicIdPartition> led = ConcurrentHashMap.newKeySet();

    private boolean stale(TopicIdPartition partition, Known known) {
        long kept = led.contains(partition) ? LEADER_KEPT_NANOS : KEPT_NANOS;
        return System.nanoTime() - known.sinceNanos >= kept;
    }

    private Known known(TopicIdPartition partition) {
        return partitions.compute(
                partition, (p, known) -> known == null || stale(p, known) ? new Known() : known);
    }

    private Known current(TopicIdPartition partition) {
        Known known = partitions.get(partition);
        return known == null || stale(partition, known) ? null : known;
    }

    public void forget(TopicIdPartition partition) {
        partitions.remove(partition);
    }

    /** Whether this broker leads the partition now (its leadership notices say). */
    public void leads(TopicIdPartition partition, boolean leader) {
        forget(partition);
        if (leader) {
            led.add(partition);
        } else {
            led.remove(partition);
        }
    }

    /** The kept listing of the partition's segments of `epoch` (null: of every epoch). */
    public Optional<List<RemoteLogSegmentMetadata>> listing(TopicIdPartition partition, Integer epoch) {
        Known known = current(partition);
        if (known == null) {
            return Optional.empty();
        }
        synchronized (known) {
            return Optional.ofNullable(known.listings.get(epoch == null ? ALL_EPOCHS : epoch));
        }
    }

    public void rememberListing(Object snapshot, Integer epoch, List<RemoteLogSegmentMetadata> segments) {
        if (segments.size() > LISTING_KEPT) {
            return;
        }
        Known known = (Known) snapshot;
        synchronized (known) {
            known.listings.put(epoch == null ? ALL_EPOCHS : epoch, List.copyOf(segments));
        }
    }

    /**
     * A handle on the partition's answers as they are now: what is remembered through it
     * after the partition was forgotten goes nowhere, so an answer that raced a write is
     * never kept.
     */
    public Object snapshot(TopicIdPartition partition) {
        return known(partition);
    }

    /**
     * The kept segment holding `offset` in `epoch`, the one the service would name: one
     * it named, or else the one finished copy a kept listing holds there. Kafka's tasks
     * list a partition they lead every run, so a reader going through it finds each next
     * segment there without asking. Two finished copies of the range (one copied again
     * after a lost answer) leave the choice to the service.
     */
    public Optional<RemoteLogSegmentMetadata> segment(TopicIdPartition partition, int epoch, long offset) {
        Known known = current(partition);
        if (known == null) {
            return Optional.empty();
        }
        synchronized (known) {
            for (RemoteLogSegmentMetadata segment : known.segments) {
                if (holds(segment, epoch, offset)) {
                    return Optional.of(segment);
                }
            }
            RemoteLogSegmentMetadata listed = null;
            for (List<RemoteLogSegmentMetadata> listing : known.listings.values()) {
                for (RemoteLogSegmentMetadata segment : listing) {
                    if (segment.state() != RemoteLogSegmentState.COPY_SEGMENT_FINISHED || !holds(segment, epoch, offset)) {
                        continue;
                    }
                    if (listed != null && !listed.remoteLogSegmentId().equals(segment.remoteLogSegmentId())) {
                        return Optional.empty();
                    }
                    listed = segment;
                }
            }
            return Optional.ofNullable(listed);
        }
    }

    private static boolean holds(RemoteLogSegmentMetadata segment, int epoch, long offset) {
        return segment.startOffset() <= offset && offset <= segment.endOffset() && epochAt(segment, offset) == epoch;
    }

    public void rememberSegment(Object snapshot, RemoteLogSegmentMetadata segment) {
        if (segment.state() != RemoteLogSegmentState.COPY_SEGMENT_FINISHED) {
            return; // only a finished copy is read, and it changes only by a write
        }
        Known known = (Known) snapshot;
        synchronized (known) {
            known.segments.addFirst(segment);
            if (known.segments.size() > SEGMENTS_KEPT) {
                known.segments.removeLast();
            }
        }
    }

    /** The epoch in force at `offset` within the segment: the last to start at or before it. */
    static int epochAt(RemoteLogSegmentMetadata segment, long offset) {
        int found = -1;
        long start = Long.MIN_VALUE;
        for (Map.Entry<Integer, Long> entry : segment.segmentLeaderEpochs().entrySet()) {
            if (entry.getValue() <= offset && entry.getValue() >= start) {
                found = entry.getKey();
                start = entry.getValue();
            }
        }
        return found;
    }
}
