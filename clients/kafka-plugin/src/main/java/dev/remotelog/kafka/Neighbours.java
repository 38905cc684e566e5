package dev.remotelog.kafka;

import com.google.protobuf.InvalidProtocolBufferException;
import java.lang.management.ManagementFactory;
import java.util.Optional;
import javax.management.InstanceAlreadyExistsException;
import javax.management.InstanceNotFoundException;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.MalformedObjectNameException;
import javax.management.ObjectName;
import javax.management.StandardMBean;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import remotelog.api.type.v1.Segment;

/**
 * Where a broker's storage manager learns which segment follows another: its metadata
 * manager knows, when it is remotelog's. Kafka configures the two plugins apart, hands
 * neither the other, and by `remote.log.*.class.path` loads each by a class loader of
 * its own, so no class of this jar is shared between them. They meet in the JVM's
 * MBean server, by the broker id Kafka gives both, passing segments as bytes
 * (NextSegmentFinderMBean). A broker whose metadata manager is another (Kafka's own)
 * finds nothing there, and reads as it did.
 */
final class Neighbours {
    /** The segment after `segment` in its partition, if the metadata manager knows it. */
    interface Finder {
        Optional<RemoteLogSegmentMetadata> after(RemoteLogSegmentMetadata segment);
    }

    private static final MBeanServer SERVER = ManagementFactory.getPlatformMBeanServer();

    private Neighbours() {}

    static ObjectName name(String broker) {
        try {
            return new ObjectName(Instruments.DOMAIN + ":type=next-segment-finder,broker=" + ObjectName.quote(broker));
        } catch (MalformedObjectNameException e) {
            throw new IllegalArgumentException("broker id " + broker, e);
        }
    }

    /** Offers `finder` for the broker (in place of any offered before); close() takes it back. */
    static AutoCloseable offer(String broker, Finder finder) {
        ObjectName name = name(broker);
        NextSegmentFinderMBean bean = segment -> answer(finder, segment);
        try {
            StandardMBean standard = new StandardMBean(bean, NextSegmentFinderMBean.class);
            try {
                SERVER.registerMBean(standard, name);
            } catch (InstanceAlreadyExistsException e) {
                SERVER.unregisterMBean(name); // a metadata manager configured again
                SERVER.registerMBean(standard, name);
            }
        } catch (JMException e) {
            throw new IllegalStateException("cannot offer the next segment finder as " + name, e);
        }
        return () -> {
            try {
                SERVER.unregisterMBean(name);
            } catch (InstanceNotFoundException e) {
                // taken back already, or replaced and taken back by its successor
            }
        };
    }

    private static byte[] answer(Finder finder, byte[] segment) {
        try {
            RemoteLogSegmentMetadata asked = Protos.metadata(Segment.RemoteLogSegmentMetadata.parseFrom(segment));
            return finder.after(asked).map(next -> Protos.metadata(next).toByteArray()).orElse(new byte[0]);
        } catch (InvalidProtocolBufferException | RuntimeException e) {
            return new byte[0];
        }
    }

    /** The finder offered for the broker, whichever class loader offered it. */
    static Finder of(String broker) {
        ObjectName name = name(broker);
        return segment -> {
            Object answer;
            try {
                answer =
                        SERVER.invoke(
                                name,
                                "segmentAfter",
                                new Object[] {Protos.metadata(segment).toByteArray()},
                                new String[] {byte[].class.getName()});
            } catch (JMException e) {
                return Optional.empty(); // none offered: another metadata manager, or closed
            }
            if (!(answer instanceof byte[]) || ((byte[]) answer).length == 0) {
                return Optional.empty();
            }
            try {
                return Optional.of(Protos.metadata(Segment.RemoteLogSegmentMetadata.parseFrom((byte[]) answer)));
            } catch (InvalidProtocolBufferException e) {
                return Optional.empty();
            }
        };
    }
}
