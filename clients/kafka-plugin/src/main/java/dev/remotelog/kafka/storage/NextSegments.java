package dev.remotelog.kafka.storage;

import dev.remotelog.kafka.util.BoundedMaps;
import java.util.Collections;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Gets the segment after one being read ready before Kafka crosses into it. At each
 * segment a remote reader used to wait, on its fetch's path, for the metadata
 * manager's lookup of the new segment, for the store's URLs of it, and (by URL from
 * object storage) for the first bytes of its indexes and its log. A read near the end
 * of a segment now has one background thread look the next segment up (NextSegmentLookup,
 * where the metadata manager's address is set) and `prepare` it.
 *
 * <p>Bounds: one thread, QUEUED segments waiting at most (more are not followed), and
 * each segment followed once while FOLLOWED_KEPT others are remembered.
 */
public final class NextSegments {
    /** The segment after `segment` in its partition, if one is known (NextSegmentLookup). */
    interface Finder {
        Optional<RemoteLogSegmentMetadata> after(RemoteLogSegmentMetadata segment);
    }

    private static final Logger LOG = LoggerFactory.getLogger(NextSegments.class);
    static final int QUEUED = 64;
    static final int FOLLOWED_KEPT = 1024;

    private final Finder finder;
    private final Consumer<RemoteLogSegmentMetadata> prepare;
    private final Runnable prepared;
    private final ThreadPoolExecutor thread;
    private final Set<RemoteLogSegmentId> followed =
            Collections.newSetFromMap(BoundedMaps.keepingNewest(FOLLOWED_KEPT, false));

    /** `prepare` gets each next segment `finder` finds; `prepared` counts them. */
    public NextSegments(
            Finder finder,
            Consumer<RemoteLogSegmentMetadata> prepare,
            Runnable prepared) {
        this.finder = finder;
        this.prepare = prepare;
        this.prepared = prepared;
        thread =
                new ThreadPoolExecutor(
                        1,
                        1,
                        30,
                        TimeUnit.SECONDS,
                        new ArrayBlockingQueue<>(QUEUED),
                        task -> {
                            Thread daemon = new Thread(task, "remotelog-next-segments");
                            daemon.setDaemon(true);
                            return daemon;
                        },
                        new ThreadPoolExecutor.AbortPolicy());
        thread.allowCoreThreadTimeOut(true);
    }

    /** Gets the segment after `segment` ready, in the background, once per segment. */
    public void follow(RemoteLogSegmentMetadata segment) {
        synchronized (followed) {
            if (!followed.add(segment.remoteLogSegmentId())) {
                return;
            }
        }
        try {
            thread.execute(() -> prepareAfter(segment));
        } catch (RejectedExecutionException e) {
            // Full, or closed: this boundary is crossed as it was before.
            synchronized (followed) {
                followed.remove(segment.remoteLogSegmentId());
            }
        }
    }

    private void prepareAfter(RemoteLogSegmentMetadata segment) {
        try {
            Optional<RemoteLogSegmentMetadata> next = finder.after(segment);
            if (next.isPresent()) {
                prepare.accept(next.get());
                prepared.run();
            }
        } catch (RuntimeException e) {
            // Only a head start is lost: Kafka's own read asks again, and fails there if
            // the failure lasts, where it is reported.
            LOG.debug("Could not get the segment after {} ready", segment.remoteLogSegmentId(), e);
        }
    }

    public void close() {
        thread.shutdownNow();
    }
}
