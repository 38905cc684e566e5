package dev.remotelog.kafka.util;

import java.util.LinkedHashMap;
import java.util.Map;

/** Maps that keep their newest `max` entries (not thread-safe: callers guard them). */
public final class BoundedMaps {
    private BoundedMaps() {}

    /** The eldest entry leaves as one more comes: the least recently used if
     * `accessOrder`, else the first put. */
    public static <K, V> Map<K, V> keepingNewest(int max, boolean accessOrder) {
        return new LinkedHashMap<>(16, 0.75f, accessOrder) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<K, V> eldest) {
                return size() > max;
            }
        };
    }
}
