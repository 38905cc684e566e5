package dev.remotelog.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.remotelog.kafka.config.KafkaApi;
import dev.remotelog.kafka.config.Settings;
import dev.remotelog.kafka.config.SettingsTest;
import dev.remotelog.kafka.metrics.Instruments;
import dev.remotelog.kafka.rpc.FailuresTest;
import dev.remotelog.kafka.rpc.Protos;
import dev.remotelog.kafka.rpc.ProtosTest;
import dev.remotelog.kafka.rpc.ServiceChannel;
import dev.remotelog.kafka.storage.NextSegmentLookup;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.ReplicaNotAvailableException;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import remotelog.api.metadata.v1.Metadata.AddRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.AddRemoteLogSegmentMetadataResponse;
import remotelog.api.metadata.v1.Metadata.GetNextSegmentWithTxnIndexRequest;
import remotelog.api.metadata.v1.Metadata.GetNextSegmentWithTxnIndexResponse;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataResponse;
import remotelog.api.metadata.v1.Metadata.IsReadyRequest;
import remotelog.api.metadata.v1.Metadata.IsReadyResponse;
import remotelog.api.metadata.v1.Metadata.ListRemoteLogSegmentsRequest;
import remotelog.api.metadata.v1.Metadata.ListRemoteLogSegmentsResponse;
import remotelog.api.metadata.v1.Metadata.OnPartitionLeadershipChangesRequest;
import remotelog.api.metadata.v1.Metadata.OnPartitionLeadershipChangesResponse;
import remotelog.api.metadata.v1.Metadata.OnStopPartitionsRequest;
import remotelog.api.metadata.v1.Metadata.OnStopPartitionsResponse;
import remotelog.api.metadata.v1.Metadata.UpdateRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.UpdateRemoteLogSegmentMetadataResponse;
import remotelog.api.metadata.v1.RemoteLogMetadataServiceGrpc;

/** The metadata manager's calls Kafka makes most often, against an in-process service: what
 * is kept of the answers, and what forgets it. */
public class MetadataManagerTest {
    final AtomicInteger readyAsked = new AtomicInteger();
    final AtomicBoolean ready = new AtomicBoolean();
    final AtomicInteger segmentsAsked = new AtomicInteger();
    final List<GetRemoteLogSegmentMetadataRequest> lookups = new CopyOnWriteArrayList<>();
    // What a listing answers, where not `finished` alone.
    volatile List<RemoteLogSegmentMetadata> listing;
    // What a lookup of an offset answers, where not `finished`.
    final Map<Long, RemoteLogSegmentMetadata> segmentAt = new ConcurrentHashMap<>();
    final AtomicInteger listingsAsked = new AtomicInteger();
    // The service answers lookups "not ready", as one restarted and loading again.
    final AtomicBoolean loading = new AtomicBoolean();
    final AtomicInteger txnIndexesAsked = new AtomicInteger();
    final RemoteLogSegmentMetadata finished =
            ProtosTest.segment(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, Optional.empty());
    // Released: the service answers notifications; held, it hangs on them.
    volatile CountDownLatch notificationsHeld = new CountDownLatch(0);
    final AtomicInteger notificationsToFail = new AtomicInteger();
    final List<OnPartitionLeadershipChangesRequest> notified = new CopyOnWriteArrayList<>();
    final List<OnStopPartitionsRequest> stopped = new CopyOnWriteArrayList<>();
    final AtomicInteger stopCalls = new AtomicInteger();
    final AtomicBoolean stopsRefused = new AtomicBoolean();
    Server server;
    RemotelogMetadataManager manager;
    static final String BROKER = "metadata-manager-test";
    String serverName;

    class Service extends RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceImplBase {
        @Override
        public void isReady(IsReadyRequest request, StreamObserver<IsReadyResponse> response) {
            readyAsked.incrementAndGet();
            response.onNext(IsReadyResponse.newBuilder().setReady(ready.get()).build());
            response.onCompleted();
        }

        @Override
        public void listRemoteLogSegments(
                ListRemoteLogSegmentsRequest request, StreamObserver<ListRemoteLogSegmentsResponse> response) {
            listingsAsked.incrementAndGet();
            ListRemoteLogSegmentsResponse.Builder answer = ListRemoteLogSegmentsResponse.newBuilder();
            (listing == null ? List.of(finished) : listing)
                    .forEach(segment -> answer.addRemoteLogSegmentMetadata(Protos.metadata(segment)));
            response.onNext(answer.build());
            response.onCompleted();
        }

        @Override
        public void getRemoteLogSegmentMetadata(
                GetRemoteLogSegmentMetadataRequest request,
                StreamObserver<GetRemoteLogSegmentMetadataResponse> response) {
            segmentsAsked.incrementAndGet();
            lookups.add(request);
            if (loading.get()) {
                response.onError(FailuresTest.remotelog(com.google.rpc.Code.UNAVAILABLE, "METADATA_NOT_READY"));
                return;
            }
            response.onNext(
                    GetRemoteLogSegmentMetadataResponse.newBuilder()
                            .setRemoteLogSegmentMetadata(
                                    Protos.metadata(segmentAt.getOrDefault(request.getOffset(), finished)))
                            .build());
            response.onCompleted();
        }

        @Override
        public void getNextSegmentWithTxnIndex(
                GetNextSegmentWithTxnIndexRequest request,
                StreamObserver<GetNextSegmentWithTxnIndexResponse> response) {
            txnIndexesAsked.incrementAndGet();
            response.onNext(GetNextSegmentWithTxnIndexResponse.getDefaultInstance());
            response.onCompleted();
        }

        @Override
        public void updateRemoteLogSegmentMetadata(
                UpdateRemoteLogSegmentMetadataRequest request,
                StreamObserver<UpdateRemoteLogSegmentMetadataResponse> response) {
            response.onNext(UpdateRemoteLogSegmentMetadataResponse.getDefaultInstance());
            response.onCompleted();
        }

        @Override
        public void onPartitionLeadershipChanges(
                OnPartitionLeadershipChangesRequest request,
                StreamObserver<OnPartitionLeadershipChangesResponse> response) {
            try {
                notificationsHeld.await(); // a hung service holds the call
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (notificationsToFail.getAndDecrement() > 0) {
                response.onError(Status.UNAVAILABLE.withDescription("down").asRuntimeException());
                return;
            }
            notified.add(request);
            response.onNext(OnPartitionLeadershipChangesResponse.getDefaultInstance());
            response.onCompleted();
        }

        @Override
        public void onStopPartitions(
                OnStopPartitionsRequest request, StreamObserver<OnStopPartitionsResponse> response) {
            stopCalls.incrementAndGet();
            if (stopsRefused.get()) {
                response.onError(Status.INVALID_ARGUMENT.withDescription("refused").asRuntimeException());
                return;
            }
            stopped.add(request);
            response.onNext(OnStopPartitionsResponse.getDefaultInstance());
            response.onCompleted();
        }

        @Override
        public void addRemoteLogSegmentMetadata(
                AddRemoteLogSegmentMetadataRequest request,
                StreamObserver<AddRemoteLogSegmentMetadataResponse> response) {
            response.onError(Status.FAILED_PRECONDITION.withDescription("fenced").asRuntimeException());
        }
    }

    @BeforeEach
    void start() throws Exception {
        serverName = InProcessServerBuilder.generateName();
        server = InProcessServerBuilder.forName(serverName).addService(new Service()).build().start();
        Settings settings =
                SettingsTest.inProcess(Settings.Role.METADATA, Settings.TIMEOUT, 10_000, "broker.id", BROKER);
        manager = new RemotelogMetadataManager();
        manager.use(new ServiceChannel(settings, InProcessChannelBuilder.forName(serverName).build()));
    }

    @AfterEach
    void stop() {
        manager.close();
        server.shutdownNow();
    }

    /** Until every notification has landed. */
    void awaitNotified() throws InterruptedException {
        for (int i = 0; i < 1000 && manager.pendingNotifications() > 0; i++) {
            Thread.sleep(10);
        }
        assertEquals(0, manager.pendingNotifications());
    }

    static TopicIdPartition partition(int number) {
        return new TopicIdPartition(ProtosTest.PARTITION.topicId(), number, "orders");
    }

    @Test
    void aHungServiceHoldsNoBrokerThreadAndItsPartitionsAreNotReady() throws Exception {
        notificationsHeld = new CountDownLatch(1);
        ready.set(true);
        // Kafka calls these while it applies metadata changes: they return, the service hung.
        assertTimeoutPreemptively(
                Duration.ofSeconds(20),
                () -> {
                    for (int round = 0; round < 100; round++) {
                        manager.onPartitionLeadershipChanges(
                                Set.of(partition(round % 3)), Set.of(partition((round + 1) % 3)));
                    }
                    manager.onStopPartitions(Set.of(partition(7)));
                });
        // One entry a partition, however many notifications arrived.
        assertEquals(4, manager.pendingNotifications());
        for (int number : new int[] {0, 1, 2}) {
            assertFalse(manager.isReady(partition(number)));
            assertThrows(
                    ReplicaNotAvailableException.class,
                    () -> manager.remoteLogSegmentMetadata(partition(number), 0, 120));
            assertThrows(
                    ReplicaNotAvailableException.class,
                    () -> manager.nextSegmentWithTxnIndex(partition(number), 0, 120));
        }
        assertEquals(0, readyAsked.get());
        assertEquals(0, segmentsAsked.get());
        assertEquals(4, Jmx.read(Jmx.METADATA, "notifications-waiting"));

        notificationsHeld.countDown();
        awaitNotified();
        // The first batch was in flight; what came after it went out in as few calls as the
        // sending thread took turns (however many rounds each held), each partition with
        // its latest role: round 98 made 2 leader, round 99 made 0 leader and 1 follower.
        Map<Object, String> roles = new java.util.HashMap<>();
        for (OnPartitionLeadershipChangesRequest request : notified) {
            request.getLeaderPartitionsList().forEach(p -> roles.put(p, "leader"));
            request.getFollowerPartitionsList().forEach(p -> roles.put(p, "follower"));
        }
        assertEquals(
                Map.of(
                        Protos.partition(partition(0)), "leader",
                        Protos.partition(partition(1)), "follower",
                        Protos.partition(partition(2)), "leader"),
                roles);
        assertTrue(notified.size() <= 3, notified.size() + " calls");
        assertEquals(List.of(Protos.partition(partition(7))), stopped.get(0).getPartitionsList());
        assertTrue(manager.isReady(partition(0)));
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition(0), 0, 120));
    }

    /** A finished segment of the partition, of offsets `start`..`end` in one epoch. */
    static RemoteLogSegmentMetadata segmentOf(long start, long end, int epoch) {
        return KafkaApi.metadata(
                new RemoteLogSegmentId(ProtosTest.PARTITION, Uuid.randomUuid()),
                start,
                end,
                1_700_000_001_000L,
                3,
                1_700_000_001_500L,
                4096,
                Optional.empty(),
                RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                Map.of(epoch, start),
                false);
    }

    @Test
    void theStorageManagerLooksTheNextSegmentUpAsKafkaWillAndNothingIsPublishedInTheJvm() throws Exception {
        // `finished` holds offsets 100..199, in epochs 0 (from 100) and 2 (from 150).
        RemoteLogSegmentMetadata next = segmentOf(200, 299, 2);
        segmentAt.put(200L, next);
        NextSegmentLookup lookup =
                new NextSegmentLookup(InProcessChannelBuilder.forName(serverName).build(), null, 5_000);
        assertEquals(Optional.of(next), lookup.after(finished));
        assertEquals(1, lookups.size());
        assertEquals(2, lookups.get(0).getLeaderEpoch()); // the epoch `finished` ends in
        assertEquals(200, lookups.get(0).getOffset());
        // A service that cannot answer: nothing found, nothing thrown at the asker.
        loading.set(true);
        assertEquals(Optional.empty(), lookup.after(segmentOf(300, 399, 3)));
        // The two plugins meet through the service alone: no bean any JMX client could call.
        var beans = java.lang.management.ManagementFactory.getPlatformMBeanServer();
        assertEquals(
                Set.of(),
                beans.queryNames(new javax.management.ObjectName(Instruments.DOMAIN + ":type=next-segment-finder,*"), null));
        for (var bean : beans.queryMBeans(new javax.management.ObjectName(Instruments.DOMAIN + ":*"), null)) {
            assertEquals(0, beans.getMBeanInfo(bean.getObjectName()).getOperations().length, bean.getObjectName().toString());
        }
    }

    @Test
    void aFailedNotificationIsSentAgainUntilItLands() throws Exception {
        notificationsToFail.set(3);
        manager.onPartitionLeadershipChanges(Set.of(ProtosTest.PARTITION), Set.of());
        assertFalse(manager.isReady(ProtosTest.PARTITION));
        awaitNotified();
        assertEquals(1, notified.size());
        assertEquals(-1, notificationsToFail.get()); // three failed, the fourth landed
        ready.set(true);
        assertTrue(manager.isReady(ProtosTest.PARTITION));
    }

    @Test
    void aNotificationRefusedForGoodIsNotSentAgain() throws Exception {
        stopsRefused.set(true);
        manager.onStopPartitions(Set.of(partition(9)));
        awaitNotified(); // dropped, not retried
        assertEquals(1, stopCalls.get());
        assertEquals(List.of(), stopped);
    }

    @Test
    void aRefusedMetadataWriteFailsItsFuture() {
        var failure =
                assertThrows(
                        ExecutionException.class,
                        () -> manager.addRemoteLogSegmentMetadata(
                                        ProtosTest.segment(RemoteLogSegmentState.COPY_SEGMENT_STARTED, Optional.empty()))
                                .get(10, TimeUnit.SECONDS));
        assertInstanceOf(IllegalStateException.class, failure.getCause());
        assertTrue(failure.getCause().getMessage().contains("FAILED_PRECONDITION"), failure.getCause().getMessage());
    }

    @Test
    void aReadyPartitionIsNotAskedAgainUntilItsLeadershipChanges() throws Exception {
        assertFalse(manager.isReady(ProtosTest.PARTITION));
        assertFalse(manager.isReady(ProtosTest.PARTITION)); // not ready: asked each time
        ready.set(true);
        for (int i = 0; i < 5; i++) {
            assertTrue(manager.isReady(ProtosTest.PARTITION));
        }
        assertEquals(3, readyAsked.get());
        ready.set(false);
        manager.onPartitionLeadershipChanges(Set.of(ProtosTest.PARTITION), Set.of());
        awaitNotified();
        assertFalse(manager.isReady(ProtosTest.PARTITION));
        assertEquals(4, readyAsked.get());
    }

    @Test
    void aListingIsKeptUntilThePartitionIsWrittenOrChangesLeadership() throws Exception {
        var partition = ProtosTest.PARTITION;
        manager.onPartitionLeadershipChanges(Set.of(partition), Set.of());
        awaitNotified();
        for (int run = 0; run < 3; run++) { // Kafka's copy and expiration tasks, run after run
            assertEquals(List.of(finished), listed(manager.listRemoteLogSegments(partition)));
            assertEquals(List.of(finished), listed(manager.listRemoteLogSegments(partition, 2)));
        }
        assertEquals(2, listingsAsked.get()); // one of every epoch, one of epoch 2
        manager.updateRemoteLogSegmentMetadata(
                        new RemoteLogSegmentMetadataUpdate(
                                finished.remoteLogSegmentId(),
                                1L,
                                Optional.empty(),
                                RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                                3))
                .get(5, TimeUnit.SECONDS);
        manager.listRemoteLogSegments(partition);
        assertEquals(3, listingsAsked.get());
        manager.onPartitionLeadershipChanges(Set.of(), Set.of(partition));
        manager.listRemoteLogSegments(partition);
        assertEquals(4, listingsAsked.get());
        assertEquals(4, Jmx.read(Jmx.METADATA, "listing-cache-hits-total"));
    }

    @Test
    void aLookupOfAListedFinishedSegmentAsksNothingUnlessTwoCopiesOfItAreListed() throws Exception {
        var partition = ProtosTest.PARTITION;
        manager.onPartitionLeadershipChanges(Set.of(partition), Set.of());
        awaitNotified();
        listed(manager.listRemoteLogSegments(partition)); // Kafka's tasks, each run
        // `finished` holds 100..199: 120 in epoch 0, 160 in epoch 2.
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition, 0, 120));
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition, 2, 160));
        assertEquals(0, segmentsAsked.get());
        // Copied again after a lost answer: two finished copies of the range, and only the
        // service knows which one it names.
        listing = List.of(finished, ProtosTest.segment(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, Optional.empty()));
        manager.onPartitionLeadershipChanges(Set.of(partition), Set.of()); // forgets what was kept
        awaitNotified();
        listed(manager.listRemoteLogSegments(partition));
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition, 0, 120));
        assertEquals(1, segmentsAsked.get());
    }

    static List<RemoteLogSegmentMetadata> listed(java.util.Iterator<RemoteLogSegmentMetadata> segments) {
        List<RemoteLogSegmentMetadata> found = new java.util.ArrayList<>();
        segments.forEachRemaining(found::add);
        return found;
    }

    @Test
    void aNotReadyAnswerForgetsThatThePartitionWasReady() throws Exception {
        ready.set(true);
        assertTrue(manager.isReady(ProtosTest.PARTITION));
        assertTrue(manager.isReady(ProtosTest.PARTITION));
        assertEquals(1, readyAsked.get());
        loading.set(true); // the service restarted and loads the partition's metadata again
        assertThrows(
                ReplicaNotAvailableException.class,
                () -> manager.remoteLogSegmentMetadata(ProtosTest.PARTITION, 0, 120));
        ready.set(false);
        assertFalse(manager.isReady(ProtosTest.PARTITION));
        assertEquals(2, readyAsked.get());
    }

    @Test
    void theSegmentOfAnOffsetIsKeptUntilThePartitionIsWritten() throws Exception {
        var partition = ProtosTest.PARTITION;
        // The segment holds 100..199: epoch 0 from 100, epoch 2 from 150.
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition, 0, 120));
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition, 0, 149));
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition, 2, 199));
        assertEquals(1, segmentsAsked.get());
        manager.remoteLogSegmentMetadata(partition, 0, 160); // epoch 2's offset: asked
        manager.remoteLogSegmentMetadata(partition, 2, 200); // past the segment: asked
        assertEquals(3, segmentsAsked.get());
        assertEquals(2, Jmx.read(Jmx.METADATA, "segment-cache-hits-total"));
        assertEquals(3, Jmx.read(Jmx.METADATA, "segment-cache-misses-total"));
        assertEquals(3, Jmx.await(Jmx.METADATA + ",method=GetRemoteLogSegmentMetadata", "calls-total", 3));
        manager.updateRemoteLogSegmentMetadata(
                        new RemoteLogSegmentMetadataUpdate(
                                finished.remoteLogSegmentId(),
                                1L,
                                Optional.empty(),
                                RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                                3))
                .get(5, TimeUnit.SECONDS);
        manager.remoteLogSegmentMetadata(partition, 0, 120);
        assertEquals(4, segmentsAsked.get());
    }

    @Test
    void aTransactionIndexLookupIsNeverKeptSinceARecoveryMayWriteOne() throws Exception {
        var partition = ProtosTest.PARTITION;
        manager.onPartitionLeadershipChanges(Set.of(partition), Set.of());
        awaitNotified();
        for (int fetch = 0; fetch < 3; fetch++) { // read_committed fetches of the same range
            assertEquals(Optional.empty(), manager.nextSegmentWithTxnIndex(partition, 0, 150));
        }
        assertEquals(3, txnIndexesAsked.get());
    }

    @Test
    void aPartitionAnsweredNotReadyIsAskedAgainForWhatWasKept() throws Exception {
        var partition = ProtosTest.PARTITION;
        manager.onPartitionLeadershipChanges(Set.of(partition), Set.of());
        awaitNotified();
        ready.set(true);
        assertTrue(manager.isReady(partition));
        listed(manager.listRemoteLogSegments(partition));
        assertEquals(Optional.of(finished), manager.remoteLogSegmentMetadata(partition, 0, 120));
        listed(manager.listRemoteLogSegments(partition));
        assertEquals(1, listingsAsked.get()); // kept, as for Kafka's tasks run after run
        // A recovery writes the partition's lost segments back: not ready meanwhile. The
        // broker learns it from a refused write or lookup; then it asks IsReady again.
        loading.set(true);
        assertThrows(
                ReplicaNotAvailableException.class,
                () -> manager.remoteLogSegmentMetadata(partition, 0, 250));
        ready.set(false);
        assertFalse(manager.isReady(partition));
        loading.set(false);
        ready.set(true);
        listing = List.of(finished, ProtosTest.segment(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, Optional.empty()));
        assertTrue(manager.isReady(partition));
        assertEquals(listing, listed(manager.listRemoteLogSegments(partition)));
        assertEquals(2, listingsAsked.get());
    }
}
