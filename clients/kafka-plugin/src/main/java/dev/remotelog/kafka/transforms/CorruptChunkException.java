package dev.remotelog.kafka.transforms;

import java.io.IOException;

/** A stored chunk that fails its authentication or decoding: reported, never served. */
public final class CorruptChunkException extends IOException {
    public CorruptChunkException(String message) {
        super(message);
    }
}
