package dev.remotelog.kafka;

import com.google.common.util.concurrent.FutureCallback;
import com.google.common.util.concurrent.Futures;
import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
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
 * RemoteLogMetadataService call with a deadline. isReady() keeps a partition's yes a while;
 * the lookups Kafka makes before each remote fetch are kept until the partition's
 * metadata is written (KnownSegments). Settings under `rlmm.config.`:
 * `metadata.manager.address`, optional `client.tls.*` and `client.auth.token.file`,
 * `client.timeout.ms`.
 */
public final class RemotelogMetadataManager implements RemoteLogMetadataManager {
    static final String PREFIX = "rlmm.config.";
    static final String ADDRESS = "metadata.manager.address";
    private static final Logger LOG = LoggerFactory.getLogger(RemotelogMetadataManager.class);
    // Kafka asks isReady() before every task run of every partition it leads. A partition
    // the service called ready stays so until its leadership changes or it stops; it is
    // asked again after this long all the same, so a restarted service is noticed.
    static final long READY_KEPT_NANOS = TimeUnit.SECONDS.toNanos(30);

    private final Map<TopicIdPartition, Long> readySince = new ConcurrentHashMap<>();
    private final KnownSegments known = new KnownSegments();

    private ServiceChannel service;
    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceFutureStub writes;
    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub reads;

    /** For the broker, which configures it by its properties. */
    public RemotelogMetadataManager() {}

    @Override
    public void configure(Map<String, ?> configs) {
        use(ServiceChannel.configure(configs, PREFIX, ADDRESS));
    }

    /** Calls go through `service` from now on (configure's, or a test's in-process one). */
    void use(ServiceChannel service) {
        this.service = service;
        writes = RemoteLogMetadataServiceGrpc.newFutureStub(service.channel());
        reads = RemoteLogMetadataServiceGrpc.newBlockingStub(service.channel());
    }

    private RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceBlockingStub read() {
        return reads.withDeadlineAfter(service.settings().timeoutMs(), TimeUnit.MILLISECONDS);
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
        done.whenComplete((ok, failure) -> known.forget(partition));
        return done;
    }

    @Override
    public Optional<RemoteLogSegmentMetadata> remoteLogSegmentMetadata(
            TopicIdPartition partition, int epochForOffset, long offset)
            throws RemoteStorageException {
        Optional<RemoteLogSegmentMetadata> kept = known.segment(partition, epochForOffset, offset);
        if (kept.isPresent()) {
            return kept;
        }
        Object before = known.snapshot(partition);
        var request =
                GetRemoteLogSegmentMetadataRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(partition))
                        .setLeaderEpoch(epochForOffset)
                        .setOffset(offset)
                        .build();
        var found =
                Failures.call(
                        "GetRemoteLogSegmentMetadata(" + partition + ")",
                        () -> read().getRemoteLogSegmentMetadata(request));
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
                Failures.call(
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
            throw Failures.translate("ListRemoteLogSegments(" + partition + ")", e);
        }
        return found.iterator();
    }

    @Override
    public void onPartitionLeadershipChanges(
            Set<TopicIdPartition> leaderPartitions, Set<TopicIdPartition> followerPartitions) {
        leaderPartitions.forEach(readySince::remove);
        followerPartitions.forEach(readySince::remove);
        leaderPartitions.forEach(known::forget);
        followerPartitions.forEach(known::forget);
        OnPartitionLeadershipChangesRequest.Builder request =
                OnPartitionLeadershipChangesRequest.newBuilder();
        leaderPartitions.forEach(p -> request.addLeaderPartitions(Protos.partition(p)));
        followerPartitions.forEach(p -> request.addFollowerPartitions(Protos.partition(p)));
        try {
            read().onPartitionLeadershipChanges(request.build());
        } catch (StatusRuntimeException e) {
            // Declares no exception: Kafka goes on and asks isReady() before each task run.
            LOG.error("{}", Failures.describe("OnPartitionLeadershipChanges", e), e);
        }
    }

    @Override
    public void onStopPartitions(Set<TopicIdPartition> partitions) {
        partitions.forEach(readySince::remove);
        partitions.forEach(known::forget);
        OnStopPartitionsRequest.Builder request = OnStopPartitionsRequest.newBuilder();
        partitions.forEach(p -> request.addPartitions(Protos.partition(p)));
        try {
            read().onStopPartitions(request.build());
        } catch (StatusRuntimeException e) {
            LOG.error("{}", Failures.describe("OnStopPartitions", e), e);
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
        return Failures.call(
                        "GetRemoteLogSize(" + partition + ")",
                        () -> read().getRemoteLogSize(request))
                .getRemoteLogSizeBytes();
    }

    // Kafka 4.0's RemoteLogMetadataManager names it (KIP-1058); on 3.x nothing calls it.
    public Optional<RemoteLogSegmentMetadata> nextSegmentWithTxnIndex(
            TopicIdPartition partition, int epoch, long offset) throws RemoteStorageException {
        if (known.noTxnIndexFrom(partition, epoch, offset)) {
            return Optional.empty();
        }
        Object before = known.snapshot(partition);
        var request =
                GetNextSegmentWithTxnIndexRequest.newBuilder()
                        .setTopicIdPartition(Protos.partition(partition))
                        .setLeaderEpoch(epoch)
                        .setOffset(offset)
                        .build();
        var found =
                Failures.call(
                        "GetNextSegmentWithTxnIndex(" + partition + ")",
                        () -> read().getNextSegmentWithTxnIndex(request));
        if (!found.hasRemoteLogSegmentMetadata()) {
            known.rememberNoTxnIndex(before, epoch, offset);
            return Optional.empty();
        }
        return Optional.of(Protos.metadata(found.getRemoteLogSegmentMetadata()));
    }

    // Kafka 4.0's RemoteLogMetadataManager names it; on 3.x nothing calls it.
    public boolean isReady(TopicIdPartition partition) {
        Long since = readySince.get(partition);
        long now = System.nanoTime();
        if (since != null && now - since < READY_KEPT_NANOS) {
            return true;
        }
        try {
            boolean ready =
                    read().isReady(
                                    IsReadyRequest.newBuilder()
                                            .setTopicIdPartition(Protos.partition(partition))
                                            .build())
                            .getReady();
            if (ready) {
                readySince.put(partition, now);
            } else {
                readySince.remove(partition);
            }
            return ready;
        } catch (StatusRuntimeException e) {
            // Asked before every task run of every partition: not ready now, asked again soon.
            LOG.warn("{}", Failures.describe("IsReady(" + partition + ")", e));
            return false;
        }
    }

    @Override
    public void close() {
        if (service != null) {
            service.close();
        }
    }
}
