package dev.remotelog.kafka.transforms;

import java.util.List;

/** Where each chunk of an object's original bytes lies in the stored object: the chunk
 * size and every stored chunk's size, as the store's manifest keeps them. */
public final class ChunkIndex {
    final long chunkSize;
    final long originalSize;
    private final long[] storedSizes;
    private final long[] storedStarts;

    /** IllegalArgumentException where the sizes cannot be an object's chunks. */
    public ChunkIndex(long chunkSize, long originalSize, List<Long> storedSizes) {
        if (chunkSize <= 0 || originalSize < 0) {
            throw new IllegalArgumentException("chunks of " + chunkSize + " bytes for " + originalSize);
        }
        long count = -Math.floorDiv(-originalSize, chunkSize);
        if (storedSizes.size() != count) {
            throw new IllegalArgumentException(
                    storedSizes.size() + " chunks do not hold " + originalSize + " bytes in chunks of " + chunkSize);
        }
        this.chunkSize = chunkSize;
        this.originalSize = originalSize;
        this.storedSizes = new long[storedSizes.size()];
        this.storedStarts = new long[storedSizes.size()];
        long position = 0;
        for (int i = 0; i < this.storedSizes.length; i++) {
            long size = storedSizes.get(i);
            if (size <= 0) {
                throw new IllegalArgumentException("chunk " + i + " has " + size + " stored bytes");
            }
            this.storedSizes[i] = size;
            this.storedStarts[i] = position;
            position += size;
        }
    }

    public long originalSize() {
        return originalSize;
    }

    /** Bytes of the stored object. */
    public long storedSize() {
        int last = storedSizes.length - 1;
        return last < 0 ? 0 : storedStarts[last] + storedSizes[last];
    }

    /** The chunk holding original byte `position`. */
    public int chunkOf(long position) {
        return Math.toIntExact(position / chunkSize);
    }

    /** The first stored byte of chunk `number`. */
    public long storedFirst(int number) {
        return storedStarts[number];
    }

    /** The last stored byte of chunk `number`. */
    public long storedLast(int number) {
        return storedStarts[number] + storedSizes[number] - 1;
    }

    int storedSizeOf(int number) {
        return Math.toIntExact(storedSizes[number]);
    }

    int originalSizeOf(int number) {
        return Math.toIntExact(Math.min(chunkSize, originalSize - number * chunkSize));
    }
}
