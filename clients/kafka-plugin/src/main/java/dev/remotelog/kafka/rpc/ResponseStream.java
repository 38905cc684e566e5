package dev.remotelog.kafka.rpc;

import com.google.protobuf.ByteString;
import io.grpc.Context;
import io.grpc.StatusRuntimeException;
import java.io.IOException;
import java.io.InputStream;
import java.util.Iterator;
import java.util.function.Function;
import java.util.function.Supplier;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

/**
 * The bytes of a server-streaming call, as the InputStream a broker reads. The broker
 * closes it after one fetch's worth of a segment: close() cancels the call, so the rest
 * of the segment is never pulled from the store.
 */
public final class ResponseStream<T> extends InputStream {
    private final String call;
    private final Context.CancellableContext context;
    private final Iterator<T> responses;
    private final Function<T, ByteString> data;
    private ByteString current = ByteString.EMPTY;
    private int offset;

    private ResponseStream(
            String call,
            Context.CancellableContext context,
            Iterator<T> responses,
            Function<T, ByteString> data) {
        this.call = call;
        this.context = context;
        this.responses = responses;
        this.data = data;
    }

    /**
     * Starts the call and waits for its first answer, so that a refusal (a missing index:
     * NOT_FOUND) is thrown here, by the method the broker called, not by a later read.
     */
    public static <T> ResponseStream<T> open(
            String call, Supplier<Iterator<T>> start, Function<T, ByteString> data)
            throws RemoteStorageException {
        Context.CancellableContext context = Context.current().withCancellation();
        Iterator<T> responses;
        Context previous = context.attach();
        try {
            responses = start.get();
        } finally {
            context.detach(previous);
        }
        ResponseStream<T> stream = new ResponseStream<>(call, context, responses, data);
        try {
            responses.hasNext();
        } catch (StatusRuntimeException e) {
            context.cancel(null);
            throw Failures.translate(call, e);
        }
        return stream;
    }

    private boolean fill() throws IOException {
        while (offset == current.size()) {
            try {
                if (!responses.hasNext()) {
                    return false;
                }
                current = data.apply(responses.next());
            } catch (StatusRuntimeException e) {
                throw new IOException(Failures.describe(call, e), e);
            }
            offset = 0;
        }
        return true;
    }

    @Override
    public int read() throws IOException {
        if (!fill()) {
            return -1;
        }
        return current.byteAt(offset++) & 0xff;
    }

    @Override
    public int read(byte[] buffer, int from, int length) throws IOException {
        if (length == 0) {
            return 0;
        }
        if (!fill()) {
            return -1;
        }
        int count = Math.min(length, current.size() - offset);
        current.copyTo(buffer, offset, from, count);
        offset += count;
        return count;
    }

    @Override
    public int available() {
        return current.size() - offset;
    }

    @Override
    public void close() {
        context.cancel(null);
    }
}
