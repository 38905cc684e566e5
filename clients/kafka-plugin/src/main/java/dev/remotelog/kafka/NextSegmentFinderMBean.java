package dev.remotelog.kafka;

/**
 * The metadata manager's answer to "which segment follows this one", for the storage
 * manager of the same broker (Neighbours). Segments go in and out as the bytes of
 * remotelog's RemoteLogSegmentMetadata message: the two plugins are loaded by class
 * loaders of their own, and share only the JDK's types and Kafka's.
 */
public interface NextSegmentFinderMBean {
    /** The segment after `segment`, or an empty array where none is known. */
    byte[] segmentAfter(byte[] segment);
}
