package dev.remotelog.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentState;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import remotelog.api.metadata.v1.Metadata.GetNextSegmentWithTxnIndexRequest;
import remotelog.api.metadata.v1.Metadata.GetNextSegmentWithTxnIndexResponse;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.GetRemoteLogSegmentMetadataResponse;
import remotelog.api.metadata.v1.Metadata.IsReadyRequest;
import remotelog.api.metadata.v1.Metadata.IsReadyResponse;
import remotelog.api.metadata.v1.Metadata.OnPartitionLeadershipChangesRequest;
import remotelog.api.metadata.v1.Metadata.OnPartitionLeadershipChangesResponse;
import remotelog.api.metadata.v1.Metadata.UpdateRemoteLogSegmentMetadataRequest;
import remotelog.api.metadata.v1.Metadata.UpdateRemoteLogSegmentMetadataResponse;
import remotelog.api.metadata.v1.RemoteLogMetadataServiceGrpc;

/** The metadata manager's calls Kafka makes most often, against an in-process service: what
 * is kept of the answers, and what forgets it. */
class MetadataManagerTest {
    final AtomicInteger readyAsked = new AtomicInteger();
    final AtomicBoolean ready = new AtomicBoolean();
    final AtomicInteger segmentsAsked = new AtomicInteger();
    final AtomicInteger txnIndexesAsked = new AtomicInteger();
    final RemoteLogSegmentMetadata finished =
            ProtosTest.segment(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, Optional.empty());
    Server server;
    RemotelogMetadataManager manager;

    class Service extends RemoteLogMetadataServiceGrpc.RemoteLogMetadataServiceImplBase {
        @Override
        public void isReady(IsReadyRequest request, StreamObserver<IsReadyResponse> response) {
            readyAsked.incrementAndGet();
            response.onNext(IsReadyResponse.newBuilder().setReady(ready.get()).build());
            response.onCompleted();
        }

        @Override
        public void getRemoteLogSegmentMetadata(
                GetRemoteLogSegmentMetadataRequest request,
                StreamObserver<GetRemoteLogSegmentMetadataResponse> response) {
            segmentsAsked.incrementAndGet();
            response.onNext(
                    GetRemoteLogSegmentMetadataResponse.newBuilder()
                            .setRemoteLogSegmentMetadata(Protos.metadata(finished))
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
            response.onNext(OnPartitionLeadershipChangesResponse.getDefaultInstance());
            response.onCompleted();
        }
    }

    @BeforeEach
    void start() throws Exception {
        String name = InProcessServerBuilder.generateName();
        server = InProcessServerBuilder.forName(name).addService(new Service()).build().start();
        Settings settings = new Settings("in-process:1", "", "", "", "", 10_000, 10_000, 4096, false);
        manager = new RemotelogMetadataManager();
        manager.use(new ServiceChannel(settings, InProcessChannelBuilder.forName(name).build()));
    }

    @AfterEach
    void stop() {
        manager.close();
        server.shutdownNow();
    }

    @Test
    void aReadyPartitionIsNotAskedAgainUntilItsLeadershipChanges() {
        assertFalse(manager.isReady(ProtosTest.PARTITION));
        assertFalse(manager.isReady(ProtosTest.PARTITION)); // not ready: asked each time
        ready.set(true);
        for (int i = 0; i < 5; i++) {
            assertTrue(manager.isReady(ProtosTest.PARTITION));
        }
        assertEquals(3, readyAsked.get());
        ready.set(false);
        manager.onPartitionLeadershipChanges(Set.of(ProtosTest.PARTITION), Set.of());
        assertFalse(manager.isReady(ProtosTest.PARTITION));
        assertEquals(4, readyAsked.get());
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
    void noTransactionIndexFromAnOffsetOnIsKeptUntilThePartitionIsWritten() throws Exception {
        var partition = ProtosTest.PARTITION;
        assertEquals(Optional.empty(), manager.nextSegmentWithTxnIndex(partition, 0, 100));
        assertEquals(Optional.empty(), manager.nextSegmentWithTxnIndex(partition, 0, 150));
        assertEquals(1, txnIndexesAsked.get());
        manager.nextSegmentWithTxnIndex(partition, 0, 50); // earlier: asked
        manager.nextSegmentWithTxnIndex(partition, 1, 150); // another epoch: asked
        assertEquals(3, txnIndexesAsked.get());
        manager.onPartitionLeadershipChanges(Set.of(), Set.of(partition));
        manager.nextSegmentWithTxnIndex(partition, 0, 150);
        assertEquals(4, txnIndexesAsked.get());
    }
}
