package dev.remotelog.kafka;

import com.google.common.util.concurrent.FutureCallback;
import com.google.common.util.concurrent.Futures;
import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.metadata.KnownSegments;
import dev.remotelog.kafka.metadata.Notifications;
import dev.remotelog.kafka.metrics.BrokerRegistry;
import dev.remotelog.kafka.metrics.Instruments;
import dev.remotelog.kafka.rpc.Failures;
import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.rpc.ServiceChannel;
import dev.remotelog.kafka.util.Warnings;
import io.grpc.StatusRuntimeException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.ReplicaNotAvailableException;
import org.apache.kafka.common.metrics.Monitorable;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadataManager;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import remotelog.api.metadata.v1.Metadata.AddRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.GetHighestOffsetForEpochRequest;
import remotelog.api.metadata.v1.Metadata.GetNextSegmentWithTxnIndexRequest;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSizeRequest;
import remotelog.api.metadata.v1.Metadata.IsReadyRequest;
import remotelog.api.metadata.v1.Metadata.ListRemoteLogSegmentsRequest;
import remotelog.api.metadata.v1.Metadata.ListRemoteLogSegmentsResponse;
import remotelog.api.metadata.v1.Metadata.OnPartitionLeadershipChangesRequest;
import remotelog.api.metadata.v1.Metadata.OnStopPartitionsRequest;
import remotelog.api.metadata.v1.Metadata.PutRemotePartitionDeleteMetadataRequest;
import remotelog.api.metadata.v1.Metadata.UpdateRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.RemoteLogMetadataServiceGrpc;
import remotelog.api.type.v1.Segment;

/**
 * Kafka's RemoteLogMetadataManager over remotelog's metadata manager: each method one
 * RemoteLogMetadataService call with a deadline, but for the leadership and stop
 * notifications, which return at once and are sent on the plugin's own thread
 * (Notifications). isReady() keeps a partition's yes a while;
 * the lookups Kafka makes before each remote fetch are kept until the partition's
 * metadata is written (KnownSegments). Settings under `rlmm.config.`:
 * see Settings.
 */
public final class RemotelogMetadataManager implements RemoteLogMetadataManager, Monitorable {
    private static final Logger LOG = LoggerFactory.getLogger(RemotelogMetadataManager.class);
    // Kafka asks isReady() before every task run of every partition it leads. A partition
    // the service called ready stays so until its leadership changes, it stops, or a call
    // of it is answered "not ready" (a restarted service, loading again); it is asked again
    // after this long all the same.
    static final long READY_KEPT_NANOS = TimeUnit.MINUTES.toNanos(10);

    private final Map<TopicIdPartition, Long> readySince = new ConcurrentHashMap<>();
    private final KnownSegments known = new KnownSegments();

    // One WARN a minute while the metadata manager cannot be reached, not one per call.
    private final Warnings unreachable = new Warnings(LOG, TimeUnit.MINUTES.toNanos(1));

    private ServiceChannel service;
    private final BrokerRegistry broker = new BrokerRegistry();
    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceFutureStub writes;
    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub reads;
    private Notifications notifications;
    private Instruments.Cache segmentCache;
    private Instruments.Cache readyCache;
    private Instruments.Cache listingCache;

    /** For the broker, which configures it by its properties. */
    public RemotelogMetadataManager() {}

    @Override
    public void configure(Map<String, ?> configs) {
        use(ServiceChannel.configure(configs, Settings.Role.METADATA));
    }

    /** Kafka 4.1+ calls this after configure() when the plugin is on the broker's class
     * path (it wraps one loaded by `remote.log.*.class.path` in a class that hides it). */
    @Override
    public void withPluginMetrics(PluginMetrics metrics) {
        broker.offer(metrics);
    }

    /** Calls go through `service` from now on (configure's, or a test's in-process one). */
    void use(ServiceChannel service) {
        close(); // a second configure() replaces the first's channel
        this.service = service;
        writes = RemoteLogMetadataServiceGrpc.newFutureStub(service.channel());
        reads = RemoteLogMetadataServiceGrpc.newBlockingStub(service.channel());
        notifications =
                new Notifications(this::sendNotifications, Failures::retriable, this::notificationFailed);
        Instruments instruments = service.instruments();
        broker.attach(instruments);
        Notifications waiting = notifications;
        instruments.gauge(
                "notifications-waiting", "Partitions whose leadership notice has not landed", waiting::size);
        segmentCache = instruments.cache("segment-cache", "Lookups of the segment of an offset");
        readyCache = instruments.cache("ready-cache", "isReady answers");
        listingCache = instruments.cache("listing-cache", "Segment listings");
    }

    private void notificationFailed(RuntimeException failure, int partitions) {
        String what = describe("Telling the metadata manager of " + partitions + " partitions' leadership", failure);
        if (Failures.retriable(failure)) {
            unreachable.warn(what + "; told again until it lands");
        } else {
            LOG.error("{}; not told again", what, failure);
        }
    }

    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub read() {
        return reads.withDeadlineAfter(service.settings().timeoutMs(), TimeUnit.MILLISECONDS);
    }

    /** For the lookups a remote fetch waits on, and isReady: a short deadline of their own. */
    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub lookup() {
        return reads.withDeadlineAfter(service.settings().lookupTimeoutMs(), TimeUnit.MILLISECONDS);
    }

    private static String describe(String what, RuntimeException failure) {
        return failure instanceof StatusRuntimeException
                ? Failures.describe(what, (StatusRuntimeException) failure)
                : what + " failed: " + failure;
    }

    /** Until a partition's leadership notification has landed its lookups are refused, as
     * Kafka's own RLMM refuses them before it has caught up. */
    private void checkNotified(TopicIdPartition partition) {
        if (notifications.isPending(partition)) {
            throw new ReplicaNotAvailableException(
                    "Remote log metadata of " + partition + " is not ready: the metadata manager"
                            + " has not yet been told of its leadership");
        }
    }

    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceFutureStub write() {
        return writes.withDeadlineAfter(service.settings().timeoutMs(), TimeUnit.MILLISECONDS);
    }

    /** The call's outcome as the CompletableFuture the broker waits on, its failure mapped. */
    private static CompletableFuture<Void> completion(String what, ListenableFuture<?> call) {
        CompletableFuture<Void> done = new CompletableFuture<>();
        Futures.addCallback(
                call,
                new FutureCallback<Object>() {
                    @Override
                    public void onSuccess(Object response) {
                        done.complete(null);
                    }

                    @Override
                    public void onFailure(Throwable failure) {
                        if (failure instanceof StatusRuntimeException) {
                            try {
                                failure = Failures.translate(what, (StatusRuntimeException) failure);
                            } catch (RuntimeException unchecked) {
                                failure = unchecked;
                            }
                        }
                        done.completeExceptionally(failure);
                    }
                },
                MoreExecutors.directExecutor());
        return done;
    }

    @Override
    public CompletableFuture<Void> addRemoteLogSegmentMetadata(RemoteLogSegmentMetadata metadata) {
        return written(
                metadata.topicIdPartition(),
                () -> completion(
                "AddRemoteLogSegmentMetadata(" + metadata.remoteLogSegmentId() + ")",
                write().addRemoteLogSegmentMetadata(
                                AddRemoteLogSegmentMetadataRequest.newBuilder()
                                        .setRemoteLogSegmentMetadata(Protos.metadata(metadata))
                                        .build())));
    }

    @Override
    public CompletableFuture<Void> updateRemoteLogSegmentMetadata(
            RemoteLogSegmentMetadataUpdate update) {
        return written(
                update.remoteLogSegmentId().topicIdPartition(),
                () -> completion(
                "UpdateRemoteLogSegmentMetadata(" + update.remoteLogSegmentId() + ")",
                write().updateRemoteLogSegmentMetadata(
                                UpdateRemoteLogSegmentMetadataRequest.newBuilder()
                                        .setRemoteLogSegmentMetadataUpdate(Protos.update(update))
                                        .build())));
    }

    @Override
    public CompletableFuture<Void> putRemotePartitionDeleteMetadata(
            RemotePartitionDeleteMetadata metadata) {
        return written(
                metadata.topicIdPartition(),
                () -> completion(
                "PutRemotePartitionDeleteMetadata(" + metadata.topicIdPartition() + ")",
                write().putRemotePartitionDeleteMetadata(
                                PutRemotePartitionDeleteMetadataRequest.newBuilder()
                                        .setRemotePartitionDeleteMetadata(Protos.delete(metadata))
                                        .build())));
    }

    /** A write of the partition's metadata: what is known of it is forgotten before the
     * write is sent and again once it is applied (or failed). */
    private CompletableFuture<Void> written(
            TopicIdPartition partition, java.util.function.Supplier<CompletableFuture<Void>> write) {
        known.forget(partition);
        CompletableFuture<Void> done = write.get();
        done.whenComplete(
                (ok, failure) -> {
                    known.forget(partition);
                    if (failure instanceof ReplicaNotAvailableException) {
                        notReady(partition);
                    }
                });
        return done;
    }

    /** One blocking call of the partition's; a "not ready" answer also forgets that the
     * partition was ready (a restarted service loading it again). */
    private <T> T call(TopicIdPartition partition, String what, java.util.function.Supplier<T> call)
            throws RemoteStorageException {
        try {
            return Failures.call(what, call);
        } catch (ReplicaNotAvailableException e) {
            notReady(partition);
            throw e;
        }
    }

    /**
     * The service said the partition is not ready: a restarted service loading it again,
     * or a recovery writing its segments back (`remotelog recover`, a writer other than
     * this broker). Whatever was kept of it is forgotten with its readiness, so once it is
     * ready again every answer comes from what the recovery wrote.
     */
    private void notReady(TopicIdPartition partition) {
        readySince.remove(partition);
        known.forget(partition);
    }

    @Override
    public Optional<RemoteLogSegmentMetadata> remoteLogSegmentMetadata(
            TopicIdPartition partition, int epochForOffset, long offset)
            throws RemoteStorageException {
        Optional<RemoteLogSegmentMetadata> kept = known.segment(partition, epochForOffset, offset);
        if (kept.isPresent()) {
            segmentCache.hit();
            return kept;
        }
        checkNotified(partition);
        segmentCache.miss();
        Object before = known.snapshot(partition);
        var request =
                GetRemoteLogSegmentMetadataRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(partition))
                        .setLeaderEpoch(epochForOffset)
                        .setOffset(offset)
                        .build();
        var found =
                call(
                        partition,
                        "GetRemoteLogSegmentMetadata(" + partition + ")",
                        () -> lookup().getRemoteLogSegmentMetadata(request));
        Optional<RemoteLogSegmentMetadata> segment =
                Protos.metadata(found.hasRemoteLogSegmentMetadata(), found.getRemoteLogSegmentMetadata());
        segment.ifPresent(s -> known.rememberSegment(before, s));
        return segment;
    }

    @Override
    public Optional<Long> highestOffsetForEpoch(TopicIdPartition partition, int leaderEpoch)
            throws RemoteStorageException {
        var request =
                GetHighestOffsetForEpochRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(partition))
                        .setLeaderEpoch(leaderEpoch)
                        .build();
        var found =
                call(
                        partition,
                        "GetHighestOffsetForEpoch(" + partition + ")",
                        () -> read().getHighestOffsetForEpoch(request));
        return found.hasOffset() ? Optional.of(found.getOffset()) : Optional.empty();
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(TopicIdPartition partition)
            throws RemoteStorageException {
        return list(partition, null);
    }

    @Override
    public Iterator<RemoteLogSegmentMetadata> listRemoteLogSegments(
            TopicIdPartition partition, int leaderEpoch) throws RemoteStorageException {
        return list(partition, leaderEpoch);
    }

    private Iterator<RemoteLogSegmentMetadata> list(TopicIdPartition partition, Integer epoch)
            throws RemoteStorageException {
        ListRemoteLogSegmentsRequest.Builder request =
                ListRemoteLogSegmentsRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(partition));
        if (epoch != null) {
            request.setLeaderEpoch(epoch);
        }
        Optional<List<RemoteLogSegmentMetadata>> kept = known.listing(partition, epoch);
        if (kept.isPresent()) {
            listingCache.hit();
            return kept.get().iterator();
        }
        listingCache.miss();
        Object before = known.snapshot(partition);
        // Read whole within the deadline: the broker may hold the iterator a long time.
        List<RemoteLogSegmentMetadata> found = new ArrayList<>();
        try {
            Iterator<ListRemoteLogSegmentsResponse> pages = read().listRemoteLogSegments(request.build());
            while (pages.hasNext()) {
                for (Segment.RemoteLogSegmentMetadata segment :
                        pages.next().getRemoteLogSegmentMetadataList()) {
                    found.add(Protos.metadata(segment));
                }
            }
        } catch (StatusRuntimeException e) {
            try {
                throw Failures.translate("ListRemoteLogSegments(" + partition + ")", e);
            } catch (ReplicaNotAvailableException notReady) {
                readySince.remove(partition);
                throw notReady;
            }
        }
        known.rememberListing(before, epoch, found);
        return found.iterator();
    }

    @Override
    public void onPartitionLeadershipChanges(
            Set<TopicIdPartition> leaderPartitions, Set<TopicIdPartition> followerPartitions) {
        forget(leaderPartitions, true);
        forget(followerPartitions, false);
        notifications.notify(leaderPartitions, Notifications.Change.LEADER);
        notifications.notify(followerPartitions, Notifications.Change.FOLLOWER);
    }

    @Override
    public void onStopPartitions(Set<TopicIdPartition> partitions) {
        forget(partitions, false);
        notifications.notify(partitions, Notifications.Change.STOPPED);
    }

    private void forget(Set<TopicIdPartition> partitions, boolean leader) {
        partitions.forEach(readySince::remove);
        partitions.forEach(p -> known.leads(p, leader));
    }

    /** One batch of notifications, on Notifications' thread: the leadership changes, then
     * the stops, each one call. */
    private void sendNotifications(Map<TopicIdPartition, Notifications.Change> batch) {
        OnPartitionLeadershipChangesRequest.Builder changes = OnPartitionLeadershipChangesRequest.newBuilder();
        OnStopPartitionsRequest.Builder stops = OnStopPartitionsRequest.newBuilder();
        batch.forEach(
                (partition, change) -> {
                    if (change == Notifications.Change.LEADER) {
                        changes.addLeaderPartitions(Protos.partition(partition));
                    } else if (change == Notifications.Change.FOLLOWER) {
                        changes.addFollowerPartitions(Protos.partition(partition));
                    } else {
                        stops.addPartitions(Protos.partition(partition));
                    }
                });
        if (changes.getLeaderPartitionsCount() + changes.getFollowerPartitionsCount() > 0) {
            read().onPartitionLeadershipChanges(changes.build());
        }
        if (stops.getPartitionsCount() > 0) {
            read().onStopPartitions(stops.build());
        }
    }

    @Override
    public long remoteLogSize(TopicIdPartition partition, int leaderEpoch)
            throws RemoteStorageException {
        var request =
                GetRemoteLogSizeRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(partition))
                        .setLeaderEpoch(leaderEpoch)
                        .build();
        return call(
                        partition,
                        "GetRemoteLogSize(" + partition + ")",
                        () -> read().getRemoteLogSize(request))
                .getRemoteLogSizeBytes();
    }

    // Kafka 4.0's RemoteLogMetadataManager names it (KIP-1058); on 3.x nothing calls it.
    public Optional<RemoteLogSegmentMetadata> nextSegmentWithTxnIndex(
            TopicIdPartition partition, int epoch, long offset) throws RemoteStorageException {
        // Never kept: "no transaction index from here on" can be undone by a writer other
        // than this broker (a recovery), where a kept "none" would hand read_committed
        // consumers aborted records.
        checkNotified(partition);
        var request =
                GetNextSegmentWithTxnIndexRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(partition))
                        .setLeaderEpoch(epoch)
                        .setOffset(offset)
                        .build();
        var found =
                call(
                        partition,
                        "GetNextSegmentWithTxnIndex(" + partition + ")",
                        () -> lookup().getNextSegmentWithTxnIndex(request));
        if (!found.hasRemoteLogSegmentMetadata()) {
            return Optional.empty();
        }
        return Optional.of(Protos.metadata(found.getRemoteLogSegmentMetadata()));
    }

    // Kafka 4.0's RemoteLogMetadataManager names it; on 3.x nothing calls it.
    public boolean isReady(TopicIdPartition partition) {
        if (notifications.isPending(partition)) {
            return false;
        }
        Long since = readySince.get(partition);
        long now = System.nanoTime();
        if (since != null && now - since < READY_KEPT_NANOS) {
            readyCache.hit();
            return true;
        }
        readyCache.miss();
        try {
            boolean ready =
                    lookup().isReady(
                                    IsReadyRequest.newBuilder()
                                            .setTopicIdPartition(Protos.partition(partition))
                                            .build())
                            .getReady();
            if (ready) {
                readySince.put(partition, now);
            } else {
                notReady(partition);
            }
            return ready;
        } catch (StatusRuntimeException e) {
            // Asked before every task run of every partition: not ready now, asked again soon.
            unreachable.warn(Failures.describe("IsReady(" + partition + ")", e));
            return false;
        }
    }

    /** How many partitions' notifications have not landed yet. */
    int pendingNotifications() {
        return notifications.size();
    }

    @Override
    public void close() {
        if (notifications != null) {
            notifications.close();
            notifications = null;
        }
        if (service != null) {
            service.close();
            service = null;
        }
    }
}
