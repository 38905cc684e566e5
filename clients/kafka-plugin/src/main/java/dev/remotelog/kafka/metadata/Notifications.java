package dev.remotelog.kafka.metadata;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Predicate;
import org.apache.kafka.common.TopicIdPartition;

/**
 * The broker's leadership and stop notifications, sent to the metadata manager on the
 * plugin's own thread so that no broker thread waits on it: Kafka calls
 * onPartitionLeadershipChanges and onStopPartitions while it applies metadata changes,
 * and its own RLMM returns from them at once.
 *
 * <p>What is not sent yet is kept per partition, its latest role only: a partition made
 * leader, then follower, sends "follower" once. So during an outage of any length the
 * queue holds at most one entry per partition. Sends go out in order, one batch at a time,
 * and a batch that failed retriably (the service down, hung, overloaded) is retried with a
 * growing pause; a partition noticed again meanwhile keeps its newer role. A batch refused
 * for good (bad input, a wrong token) is dropped, not retried forever. Until a partition's notification has landed it is pending, which
 * the RLMM answers as Kafka's own does before it has caught up: not ready.
 */
public final class Notifications implements AutoCloseable {
    public enum Change {
        LEADER,
        FOLLOWER,
        STOPPED
    }

    /** Sends one batch; throws (any RuntimeException) if it did not land. */
    public interface Sender {
        void send(Map<TopicIdPartition, Change> batch);
    }

    static final long FIRST_RETRY_MS = 100;
    static final long MAX_RETRY_MS = 10_000;

    private final Sender sender;
    private final Predicate<RuntimeException> retriable;
    private final BiConsumer<RuntimeException, Integer> onFailure;
    private final ScheduledExecutorService thread;
    // Guarded by this: what waits to be sent, and what is being sent.
    private final Map<TopicIdPartition, Change> pending = new LinkedHashMap<>();
    private Map<TopicIdPartition, Change> inFlight = Map.of();
    private boolean scheduled;
    private boolean closed;
    private long retryMs = FIRST_RETRY_MS;

    /** `onFailure` is told of each failed send, and of how many partitions it held. */
    public Notifications(
            Sender sender,
            Predicate<RuntimeException> retriable,
            BiConsumer<RuntimeException, Integer> onFailure) {
        this.sender = sender;
        this.retriable = retriable;
        this.onFailure = onFailure;
        this.thread =
                Executors.newSingleThreadScheduledExecutor(
                        task -> {
                            Thread thread = new Thread(task, "remotelog-rlmm-notifications");
                            thread.setDaemon(true);
                            return thread;
                        });
    }

    /** Queues `change` for each of `partitions`, superseding what they had queued. */
    public synchronized void notify(Iterable<TopicIdPartition> partitions, Change change) {
        for (TopicIdPartition partition : partitions) {
            pending.remove(partition); // re-inserted last: the newest change goes out last
            pending.put(partition, change);
        }
        if (!scheduled && !closed && !pending.isEmpty()) {
            scheduled = true;
            thread.execute(this::sendPending);
        }
    }

    /** Whether a notification of the partition has not landed yet. */
    public synchronized boolean isPending(TopicIdPartition partition) {
        return pending.containsKey(partition) || inFlight.containsKey(partition);
    }

    /** How many partitions wait (for tests and metrics). */
    public synchronized int size() {
        Map<TopicIdPartition, Change> all = new LinkedHashMap<>(inFlight);
        all.putAll(pending);
        return all.size();
    }

    private void sendPending() {
        Map<TopicIdPartition, Change> batch;
        synchronized (this) {
            batch = new LinkedHashMap<>(pending);
            pending.clear();
            inFlight = batch;
        }
        boolean landed;
        try {
            sender.send(batch);
            landed = true;
        } catch (RuntimeException e) {
            landed = !retriable.test(e);
            onFailure.accept(e, batch.size());
        }
        synchronized (this) {
            inFlight = Map.of();
            if (!landed) {
                // Put back what nothing newer superseded, ahead of the newer ones.
                Map<TopicIdPartition, Change> merged = new LinkedHashMap<>(batch);
                merged.keySet().removeAll(pending.keySet());
                merged.putAll(pending);
                pending.clear();
                pending.putAll(merged);
            }
            if (pending.isEmpty() || closed) {
                scheduled = false;
                retryMs = FIRST_RETRY_MS;
                return;
            }
            if (landed) {
                retryMs = FIRST_RETRY_MS;
                thread.execute(this::sendPending);
            } else {
                thread.schedule(this::sendPending, retryMs, TimeUnit.MILLISECONDS);
                retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
            }
        }
    }

    @Override
    public void close() {
        synchronized (this) {
            closed = true;
        }
        thread.shutdownNow();
    }
}
