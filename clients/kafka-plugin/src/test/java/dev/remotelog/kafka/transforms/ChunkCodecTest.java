package dev.remotelog.kafka.transforms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.apache.kafka.common.Uuid;
import org.junit.jupiter.api.Test;

class ChunkCodecTest {
    private static final Uuid TOPIC = Uuid.randomUuid();
    private static final Uuid SEGMENT = Uuid.randomUuid();
    private static final byte[] KEY = new byte[32];

    static {
        new Random(7).nextBytes(KEY);
    }

    private static byte[] text(int size) {
        byte[] line = "order 00000042 shipped to warehouse 7\n".getBytes(StandardCharsets.US_ASCII);
        byte[] bytes = new byte[size];
        for (int i = 0; i < size; i++) {
            bytes[i] = line[i % line.length];
        }
        return bytes;
    }

    @Test
    void aChunkReadsBackAsItWasAndShrinksWhereItCompresses() throws Exception {
        ChunkCodec codec = new ChunkCodec(TOPIC, SEGMENT, ChunkCodec.Kind.LOG, 3, KEY);
        byte[] original = text(100_000);
        byte[] stored = codec.encode(4, original, 0, original.length);
        assertTrue(stored.length < original.length / 10, "compressed then encrypted");
        assertArrayEquals(original, codec.decode(4, stored, 0, stored.length, original.length));
        // Random bytes do not shrink: stored as they are, with a flag, a nonce and a tag.
        byte[] noise = new byte[70_000];
        new Random(3).nextBytes(noise);
        byte[] sealed = codec.encode(0, noise, 0, noise.length);
        assertEquals(noise.length + 1 + 12 + 16, sealed.length);
        assertArrayEquals(noise, codec.decode(0, sealed, 0, sealed.length, noise.length));
    }

    @Test
    void aChunkMovedAlteredOrOpenedWithAnotherKeyIsCorruptionNamingTheChunk() {
        ChunkCodec codec = new ChunkCodec(TOPIC, SEGMENT, ChunkCodec.Kind.LOG, 3, KEY);
        byte[] original = text(5_000);
        byte[] stored = codec.encode(2, original, 0, original.length);
        CorruptChunkException moved =
                assertThrows(CorruptChunkException.class, () -> codec.decode(3, stored, 0, stored.length, 5_000));
        assertTrue(moved.getMessage().contains("segment " + SEGMENT + " log chunk 3"), moved.getMessage());
        ChunkCodec indexes = new ChunkCodec(TOPIC, SEGMENT, ChunkCodec.Kind.INDEXES, 3, KEY);
        assertThrows(CorruptChunkException.class, () -> indexes.decode(2, stored, 0, stored.length, 5_000));
        byte[] altered = stored.clone();
        altered[altered.length / 2] ^= 1;
        assertThrows(CorruptChunkException.class, () -> codec.decode(2, altered, 0, altered.length, 5_000));
        byte[] otherKey = KEY.clone();
        otherKey[0] ^= 1;
        ChunkCodec other = new ChunkCodec(TOPIC, SEGMENT, ChunkCodec.Kind.LOG, 3, otherKey);
        assertThrows(CorruptChunkException.class, () -> other.decode(2, stored, 0, stored.length, 5_000));
    }

    @Test
    void withoutAKeyAChunkIsItsFlagAndPayload() throws Exception {
        ChunkCodec plain = new ChunkCodec(TOPIC, SEGMENT, ChunkCodec.Kind.INDEXES, null, null);
        byte[] original = text(1_000);
        byte[] stored = plain.encode(0, original, 0, original.length);
        assertEquals(0, stored[0]);
        assertEquals(original.length + 1, stored.length);
        assertArrayEquals(original, plain.decode(0, stored, 0, stored.length, original.length));
        assertThrows(CorruptChunkException.class, () -> plain.decode(0, stored, 0, stored.length, 999));
    }

    private static byte[] batch(int attributes) {
        ByteBuffer batch = ByteBuffer.allocate(70);
        batch.putLong(0, 0).putInt(8, 70 - 12).put(16, (byte) 2).putShort(21, (short) attributes);
        return batch.array();
    }

    @Test
    void aSegmentIsTakenForCompressedWhereEveryWholeBatchHeaderSaysSo() {
        byte[] zstd = batch(4);
        byte[] none = batch(0);
        byte[] both = ByteBuffer.allocate(140).put(zstd).put(none).array();
        byte[] twoZstd = ByteBuffer.allocate(150).put(zstd).put(zstd).put(new byte[10]).array();
        assertTrue(SegmentEncoder.batchesCompressed(twoZstd));
        assertFalse(SegmentEncoder.batchesCompressed(both));
        assertFalse(SegmentEncoder.batchesCompressed(new byte[40]), "no whole header");
        assertFalse(SegmentEncoder.batchesCompressed(text(200)), "no batches");
    }
}
