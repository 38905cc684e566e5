package dev.remotelog.kafka.transforms;

import com.github.luben.zstd.Zstd;
import com.github.luben.zstd.ZstdException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.util.Arrays;
import javax.crypto.AEADBadTagException;
import javax.crypto.Cipher;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;
import org.apache.kafka.common.Uuid;

/**
 * The chunks of one object of one segment, encoded as the store encodes them
 * (docs/segment-store.md, "Chunks"): a stored chunk is {@code flag || payload} (flag 0:
 * the original bytes, 1: their zstd frame), and with a data key {@code nonce ||
 * AES-256-GCM(flag || payload)}, its associated data binding the topic id, the segment id,
 * the object and the chunk's number, so that a chunk moved elsewhere fails its tag.
 * zstd is Kafka's own (zstd-jni, on every broker's class path); AES-GCM the JDK's.
 */
public final class ChunkCodec {
    public static final int NONCE_BYTES = 12;
    private static final int TAG_BITS = 128;
    private static final byte RAW = 0;
    private static final byte ZSTD = 1;
    private static final byte[] AAD_LABEL = "remotelog-chunk-v1".getBytes(StandardCharsets.US_ASCII);
    private static final SecureRandom NONCES = new SecureRandom();

    /** Which of a segment's objects a chunk belongs to, as the store numbers them. */
    public enum Kind {
        LOG(1),
        INDEXES(2);

        final int number;

        Kind(int number) {
            this.number = number;
        }
    }

    private final String segment;
    private final byte[] aadPrefix;
    private final Kind kind;
    /** Null: chunks are never compressed. */
    private final Integer compressionLevel;
    /** Null: chunks are not encrypted. */
    private final SecretKeySpec dataKey;

    public ChunkCodec(Uuid topicId, Uuid segmentId, Kind kind, Integer compressionLevel, byte[] dataKey) {
        this.segment = segmentId.toString();
        this.kind = kind;
        this.compressionLevel = compressionLevel;
        this.dataKey = dataKey == null || dataKey.length == 0 ? null : new SecretKeySpec(dataKey, "AES");
        this.aadPrefix =
                ByteBuffer.allocate(AAD_LABEL.length + 33)
                        .put(AAD_LABEL)
                        .putLong(topicId.getMostSignificantBits())
                        .putLong(topicId.getLeastSignificantBits())
                        .putLong(segmentId.getMostSignificantBits())
                        .putLong(segmentId.getLeastSignificantBits())
                        .put((byte) kind.number)
                        .array();
    }

    /** The codec of the same object with chunks no longer compressed (the heuristic's
     * choice for a segment whose producer compressed it). */
    public ChunkCodec uncompressed() {
        return new ChunkCodec(this, null);
    }

    private ChunkCodec(ChunkCodec other, Integer compressionLevel) {
        this.segment = other.segment;
        this.aadPrefix = other.aadPrefix;
        this.kind = other.kind;
        this.dataKey = other.dataKey;
        this.compressionLevel = compressionLevel;
    }

    public boolean compresses() {
        return compressionLevel != null;
    }

    /** The stored form of chunk {@code number}: compressed where that shrinks it. */
    public byte[] encode(int number, byte[] original, int offset, int length) {
        byte flag = RAW;
        byte[] payload = null;
        if (compressionLevel != null) {
            byte[] compressed = Zstd.compress(Arrays.copyOfRange(original, offset, offset + length), compressionLevel);
            if (compressed.length < length) {
                flag = ZSTD;
                payload = compressed;
            }
        }
        byte[] plain = new byte[1 + (payload == null ? length : payload.length)];
        plain[0] = flag;
        if (payload == null) {
            System.arraycopy(original, offset, plain, 1, length);
        } else {
            System.arraycopy(payload, 0, plain, 1, payload.length);
        }
        if (dataKey == null) {
            return plain;
        }
        byte[] nonce = new byte[NONCE_BYTES];
        NONCES.nextBytes(nonce);
        try {
            Cipher cipher = cipher(Cipher.ENCRYPT_MODE, number, nonce);
            byte[] stored = new byte[NONCE_BYTES + cipher.getOutputSize(plain.length)];
            System.arraycopy(nonce, 0, stored, 0, NONCE_BYTES);
            cipher.doFinal(plain, 0, plain.length, stored, NONCE_BYTES);
            return stored;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("AES-GCM is in every Java", e);
        }
    }

    /** Chunk {@code number}'s original bytes from its stored bytes; CorruptChunkException
     * for anything that is not one, none of its bytes returned. */
    public byte[] decode(int number, byte[] stored, int offset, int length, int originalSize)
            throws CorruptChunkException {
        String what = "segment " + segment + " " + kind.name().toLowerCase(java.util.Locale.ROOT) + " chunk " + number;
        byte[] plain = stored;
        int from = offset;
        int size = length;
        if (dataKey != null) {
            if (length < NONCE_BYTES + TAG_BITS / 8 + 1) {
                throw new CorruptChunkException(what + ": " + length + " bytes, too short for its nonce");
            }
            byte[] nonce = Arrays.copyOfRange(stored, offset, offset + NONCE_BYTES);
            try {
                plain = cipher(Cipher.DECRYPT_MODE, number, nonce)
                        .doFinal(stored, offset + NONCE_BYTES, length - NONCE_BYTES);
            } catch (AEADBadTagException e) {
                throw new CorruptChunkException(what + ": fails its authentication (tampered, swapped or another key's)");
            } catch (GeneralSecurityException e) {
                throw new IllegalStateException("AES-GCM is in every Java", e);
            }
            from = 0;
            size = plain.length;
        }
        if (size == 0) {
            throw new CorruptChunkException(what + ": empty");
        }
        byte flag = plain[from];
        byte[] original;
        if (flag == ZSTD) {
            try {
                original = Zstd.decompress(Arrays.copyOfRange(plain, from + 1, from + size), originalSize);
            } catch (ZstdException e) {
                throw new CorruptChunkException(what + ": zstd: " + e.getMessage());
            }
        } else if (flag == RAW) {
            original = Arrays.copyOfRange(plain, from + 1, from + size);
        } else {
            throw new CorruptChunkException(what + ": unknown chunk flag " + flag);
        }
        if (original.length != originalSize) {
            throw new CorruptChunkException(what + ": " + original.length + " bytes where the index says " + originalSize);
        }
        return original;
    }

    private Cipher cipher(int mode, int number, byte[] nonce) throws GeneralSecurityException {
        Cipher cipher = Cipher.getInstance("AES/GCM/NoPadding");
        cipher.init(mode, dataKey, new GCMParameterSpec(TAG_BITS, nonce));
        cipher.updateAAD(ByteBuffer.allocate(aadPrefix.length + 4).put(aadPrefix).putInt(number).array());
        return cipher;
    }
}
