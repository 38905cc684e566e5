package dev.remotelog.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import remotelog.api.metadata.v1.Metadata.IsReadyRequest;
import remotelog.api.metadata.v1.Metadata.IsReadyResponse;
import remotelog.api.metadata.v1.Metadata.OnPartitionLeadershipChangesRequest;
import remotelog.api.metadata.v1.Metadata.OnPartitionLeadershipChangesResponse;
import remotelog.api.metadata.v1.RemoteLogMetadataServiceGrpc;

/** The metadata manager's calls Kafka makes most often, against an in-process service. */
class MetadataManagerTest {
    final AtomicInteger readyAsked = new AtomicInteger();
    final AtomicBoolean ready = new AtomicBoolean();
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
}
