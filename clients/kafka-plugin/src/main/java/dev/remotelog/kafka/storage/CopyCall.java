package dev.remotelog.kafka.storage;

import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.concurrent.CompletableFuture;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataRequest;
import remotelog.api.segmentstore.v1.SegmentStore.CopyLogSegmentDataResponse;

/**
 * One CopyLogSegmentData call, sent from the broker's copy thread with gRPC's flow
 * control: a chunk goes out only when the transport is ready for it, so a segment is
 * never held in memory whole.
 */
public final class CopyCall
        implements ClientResponseObserver<CopyLogSegmentDataRequest, CopyLogSegmentDataResponse> {
    public final CompletableFuture<CopyLogSegmentDataResponse> result = new CompletableFuture<>();
    private final Object ready = new Object();
    private ClientCallStreamObserver<CopyLogSegmentDataRequest> requests;

    @Override
    public void beforeStart(ClientCallStreamObserver<CopyLogSegmentDataRequest> requests) {
        this.requests = requests;
        requests.setOnReadyHandler(this::wake);
    }

    private void wake() {
        synchronized (ready) {
            ready.notifyAll();
        }
    }

    /** Sends `request` once the transport takes it; false if the call already ended
     * (the store refused the copy: `result` says why). */
    public boolean send(CopyLogSegmentDataRequest request) throws InterruptedException {
        synchronized (ready) {
            while (!requests.isReady() && !result.isDone()) {
                ready.wait(100);
            }
        }
        if (result.isDone()) {
            return false;
        }
        requests.onNext(request);
        return true;
    }

    public void finish() {
        requests.onCompleted();
    }

    /** Cancels the call if it has not ended, so no stream outlives the copy that made it. */
    public void abandonUnlessDone() {
        if (!result.isDone()) {
            requests.cancel("the copy ended without the store's answer", null);
        }
    }

    @Override
    public void onNext(CopyLogSegmentDataResponse response) {
        result.complete(response);
    }

    @Override
    public void onError(Throwable failure) {
        result.completeExceptionally(failure);
        wake();
    }

    @Override
    public void onCompleted() {
        result.completeExceptionally(
                Status.INTERNAL.withDescription("the store answered nothing").asRuntimeException());
        wake();
    }
}
