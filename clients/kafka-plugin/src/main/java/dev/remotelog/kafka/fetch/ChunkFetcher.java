package dev.remotelog.kafka.fetch;

import java.io.IOException;
import java.net.URI;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;

/** Bytes `first`..`last` (inclusive) of a segment's object at a URL, fewer where it ends
 * first: what one layer of the URL read pipeline asks of the layer below it. */
public interface ChunkFetcher {
    byte[] fetch(URI url, RemoteLogSegmentId segment, long first, long last)
            throws IOException, RemoteResourceNotFoundException;
}
