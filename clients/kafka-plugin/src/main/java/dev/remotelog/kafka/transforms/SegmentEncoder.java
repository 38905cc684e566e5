package dev.remotelog.kafka.transforms;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.common.Uuid;

/**
 * A segment's log and indexes encoded as chunks before a copy by URL PUTs them, as the
 * store would encode them itself (PrepareSegmentUpload says how): each chunk of
 * {@code chunkSize} original bytes compressed, then encrypted, on its own. Where the
 * heuristic is on, a segment whose first chunk holds only batches its producer
 * compressed is not compressed at all.
 */
public final class SegmentEncoder {
    /** A record batch's header: baseOffset, batchLength, partitionLeaderEpoch, magic,
     * crc, attributes...; 61 bytes in all (Kafka's DefaultRecordBatch). */
    private static final int BATCH_HEADER_BYTES = 61;
    private static final int LOG_OVERHEAD = 12;
    private static final int LENGTH_AT = 8;
    private static final int MAGIC_AT = 16;
    private static final int ATTRIBUTES_AT = 21;
    private static final int COMPRESSION_CODEC_MASK = 0x07;

    /** An object's stored chunks: their bytes one after another, and each one's size. */
    public static final class Encoded {
        public final byte[] bytes;
        public final long[] storedSizes;

        Encoded(byte[] bytes, long[] storedSizes) {
            this.bytes = bytes;
            this.storedSizes = storedSizes;
        }
    }

    private final int chunkSize;
    private final boolean heuristic;
    private ChunkCodec log;
    private ChunkCodec indexes;

    public SegmentEncoder(
            Uuid topicId, Uuid segmentId, int chunkSize, Integer compressionLevel, boolean heuristic, byte[] dataKey) {
        this.chunkSize = chunkSize;
        this.heuristic = heuristic;
        this.log = new ChunkCodec(topicId, segmentId, ChunkCodec.Kind.LOG, compressionLevel, dataKey);
        this.indexes = new ChunkCodec(topicId, segmentId, ChunkCodec.Kind.INDEXES, compressionLevel, dataKey);
    }

    /** Whether any chunk may be compressed (the manifest says so). */
    public boolean compressed() {
        return log.compresses();
    }

    /**
     * The log's chunks written to {@code into} one after another, each chunk's stored size
     * returned: encoded {@code parallel} at a time on {@code threads}, written in order, an
     * IOException where that outlasts {@code deadline} (System.nanoTime()).
     */
    public long[] encodeLog(FileChannel source, FileChannel into, ExecutorService threads, int parallel, long deadline)
            throws IOException, InterruptedException {
        long size = source.size();
        int count = (int) Math.max(0, -Math.floorDiv(-size, (long) chunkSize));
        long[] sizes = new long[count];
        if (count == 0) {
            return sizes;
        }
        byte[] first = read(source, 0);
        if (heuristic && log.compresses() && batchesCompressed(first)) {
            log = log.uncompressed();
            indexes = indexes.uncompressed();
        }
        ChunkCodec codec = log;
        Deque<Future<byte[]>> pending = new ArrayDeque<>();
        pending.add(threads.submit(() -> codec.encode(0, first, 0, first.length)));
        int written = 0;
        try {
            for (int number = 1; number < count || !pending.isEmpty(); ) {
            if (number < count && pending.size() < parallel) {
                int chunk = number++;
                pending.add(threads.submit(() -> {
                    byte[] original = read(source, chunk);
                    return codec.encode(chunk, original, 0, original.length);
                }));
                continue;
            }
            byte[] stored = await(pending.removeFirst(), deadline);
            sizes[written++] = stored.length;
            ByteBuffer out = ByteBuffer.wrap(stored);
            while (out.hasRemaining()) {
                into.write(out);
            }
            }
        } finally {
            for (Future<byte[]> encoding : pending) {
                encoding.cancel(true);
            }
        }
        return sizes;
    }

    /** The indexes object (small: encoded where it is). */
    public Encoded encodeIndexes(byte[] original) {
        int count = -Math.floorDiv(-original.length, chunkSize);
        long[] sizes = new long[count];
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream(original.length);
        for (int number = 0; number < count; number++) {
            int from = number * chunkSize;
            byte[] stored = indexes.encode(number, original, from, Math.min(chunkSize, original.length - from));
            sizes[number] = stored.length;
            out.write(stored, 0, stored.length);
        }
        return new Encoded(out.toByteArray(), sizes);
    }

    private byte[] read(FileChannel source, int number) throws IOException {
        long position = (long) number * chunkSize;
        int length = (int) Math.min(chunkSize, source.size() - position);
        ByteBuffer chunk = ByteBuffer.allocate(length);
        while (chunk.hasRemaining()) {
            if (source.read(chunk, position + chunk.position()) < 0) {
                throw new IOException("the log ended within chunk " + number);
            }
        }
        return chunk.array();
    }

    private static byte[] await(Future<byte[]> encoding, long deadline) throws IOException, InterruptedException {
        try {
            return encoding.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            throw cause instanceof IOException ? (IOException) cause : new IOException(cause);
        } catch (TimeoutException e) {
            encoding.cancel(true);
            throw new IOException("encoding the log's chunks outlasted the copy's timeout");
        }
    }

    /** Whether every batch whose header lies whole in {@code data} (a segment's first
     * bytes) was compressed by its producer, from the batch attributes alone; false where
     * no header is whole, or for bytes that are no batches of magic 2. */
    static boolean batchesCompressed(byte[] data) {
        ByteBuffer bytes = ByteBuffer.wrap(data);
        long position = 0;
        int seen = 0;
        while (position + BATCH_HEADER_BYTES <= data.length) {
            int at = (int) position;
            int length = bytes.getInt(at + LENGTH_AT);
            if (bytes.get(at + MAGIC_AT) != 2
                    || length < BATCH_HEADER_BYTES - LOG_OVERHEAD
                    || (bytes.getShort(at + ATTRIBUTES_AT) & COMPRESSION_CODEC_MASK) == 0) {
                return false;
            }
            seen++;
            position += LOG_OVERHEAD + (long) length;
        }
        return seen > 0;
    }
}
