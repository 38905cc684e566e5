package dev.remotelog.kafka;

import dev.remotelog.kafka.metrics.Instruments;
import java.lang.management.ManagementFactory;
import javax.management.ObjectName;

/** The plugin's metrics as an operator's JMX client reads them. */
public final class Jmx {
    private Jmx() {}

    static final String STORAGE = Instruments.DOMAIN + ":type=remote-storage-manager-metrics";
    static final String METADATA = Instruments.DOMAIN + ":type=remote-log-metadata-manager-metrics";

    /** `attribute` of the MBean `name` once it is `expected` (a call is counted as it
     * closes, which may come after the caller returns); what it was after 10 s. */
    static double await(String name, String attribute, double expected) throws Exception {
        for (int i = 0; i < 1000; i++) {
            try {
                if (read(name, attribute) == expected) {
                    return expected;
                }
            } catch (javax.management.InstanceNotFoundException e) {
                // registered at the call's first close
            }
            Thread.sleep(10);
        }
        return read(name, attribute);
    }

    /** `attribute` of the MBean `name` (STORAGE or METADATA, then any tags). */
    static double read(String name, String attribute) throws Exception {
        Object value = ManagementFactory.getPlatformMBeanServer().getAttribute(new ObjectName(name), attribute);
        return ((Number) value).doubleValue();
    }
}
