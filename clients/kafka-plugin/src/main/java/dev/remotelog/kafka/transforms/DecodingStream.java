package dev.remotelog.kafka.transforms;

import dev.remotelog.kafka.util.BulkInputStream;
import java.io.IOException;
import java.io.InputStream;

/**
 * Original bytes {@code first..last} of an object stored as chunks, from a stream of its
 * stored bytes that starts at the first chunk they lie in: each chunk read whole,
 * authenticated and decoded before any of its bytes is served (a CorruptChunkException
 * instead, none of them served).
 */
public final class DecodingStream extends BulkInputStream {
    private final InputStream stored;
    private final ChunkCodec codec;
    private final ChunkIndex index;
    private final long first;
    private final long last;
    private int number;
    private byte[] chunk = new byte[0];
    private int position;
    private int end;

    public DecodingStream(InputStream stored, ChunkCodec codec, ChunkIndex index, long first, long last) {
        this.stored = stored;
        this.codec = codec;
        this.index = index;
        this.first = first;
        this.last = last;
        this.number = index.chunkOf(first);
    }

    @Override
    public int read(byte[] buffer, int from, int length) throws IOException {
        if (length == 0) {
            return 0;
        }
        while (position >= end) {
            if (number > index.chunkOf(last)) {
                return -1;
            }
            next();
        }
        int count = Math.min(length, end - position);
        System.arraycopy(chunk, position, buffer, from, count);
        position += count;
        return count;
    }

    /** The next chunk decoded, and the part of it that lies in the range. */
    private void next() throws IOException {
        int size = index.storedSizeOf(number);
        byte[] bytes = stored.readNBytes(size);
        if (bytes.length != size) {
            throw new CorruptChunkException(
                    "chunk " + number + ": the stored object ends after " + bytes.length + " of its " + size + " bytes");
        }
        chunk = codec.decode(number, bytes, 0, size, index.originalSizeOf(number));
        long chunkStart = number * index.chunkSize;
        position = (int) Math.max(0, first - chunkStart);
        end = (int) (Math.min(last - chunkStart, chunk.length - 1) + 1);
        number++;
    }

    @Override
    public void close() throws IOException {
        stored.close();
    }
}
