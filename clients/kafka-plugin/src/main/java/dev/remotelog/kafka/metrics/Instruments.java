package dev.remotelog.kafka.metrics;

import dev.remotelog.kafka.config.Settings;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall.SimpleForwardingClientCall;
import io.grpc.ForwardingClientCallListener.SimpleForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Avg;
import org.apache.kafka.common.metrics.stats.Max;
import org.apache.kafka.common.metrics.stats.Meter;
import org.apache.kafka.common.metrics.stats.WindowedCount;
import org.apache.kafka.common.utils.Time;

/**
 * A plugin's metrics, in Kafka's own Metrics with a JmxReporter, under the JMX domain
 * `remotelog.kafka.plugin`, group `remote-storage-manager-metrics` or
 * `remote-log-metadata-manager-metrics` (docs/kafka-plugin.md lists them):
 *
 * <ul>
 *   <li>each gRPC method (tag `method`): calls-rate, calls-total, latency-avg, latency-max
 *       (ms, from start to close); and each failure code (tags `method`, `code`):
 *       errors-rate, errors-total. CANCELLED is not a failure: it is how a broker ends a
 *       fetch stream it has read enough of;
 *   <li>counters of the plugin's own (bytes, reads by URL or stream, cache hits and misses):
 *       NAME-rate and NAME-total;
 *   <li>gauges (copies in flight, notifications waiting).
 * </ul>
 *
 * On a Kafka 4.1+ broker that hands the plugin its registry, each is mirrored there too
 * (BrokerMetrics).
 */
public final class Instruments implements AutoCloseable {
    public static final String DOMAIN = "remotelog.kafka.plugin";

    private final Metrics metrics;
    private final String group;
    private final Map<String, Sensor> sensors = new ConcurrentHashMap<>();

    public Instruments(Settings.Role role) {
        this.group = (role == Settings.Role.STORAGE ? "remote-storage-manager" : "remote-log-metadata-manager") + "-metrics";
        JmxReporter jmx = new JmxReporter();
        List<MetricsReporter> reporters = new ArrayList<>(List.of(jmx)); // mirrorTo adds one
        this.metrics =
                new Metrics(new MetricConfig(), reporters, Time.SYSTEM, new KafkaMetricsContext(DOMAIN));
    }

    String group() {
        return group;
    }

    private MetricName name(String name, String description, Map<String, String> tags) {
        return metrics.metricName(name, group, description, tags);
    }

    private static Map<String, String> tags(String... pairs) {
        Map<String, String> tags = new LinkedHashMap<>(); // JMX names keep their order
        for (int i = 0; i < pairs.length; i += 2) {
            tags.put(pairs[i], pairs[i + 1]);
        }
        return tags;
    }

    /** A NAME-rate and NAME-total counter; record(n) adds n. */
    public Sensor counter(String name, String description, String... tagPairs) {
        Map<String, String> tags = tags(tagPairs);
        return sensors.computeIfAbsent(
                name + tags,
                key -> {
                    Sensor sensor = metrics.sensor(group + ":" + key);
                    sensor.add(
                            new Meter(
                                    new WindowedCount(),
                                    name(name + "-rate", description + ", per second", tags),
                                    name(name + "-total", description + ", in all", tags)));
                    return sensor;
                });
    }

    /** A sum: NAME-rate and NAME-total of what is recorded (bytes). */
    public Sensor sum(String name, String description) {
        return sensors.computeIfAbsent(
                name,
                key -> {
                    Sensor sensor = metrics.sensor(group + ":" + key);
                    sensor.add(
                            new Meter(
                                    name(name + "-rate", description + ", per second", tags()),
                                    name(name + "-total", description + ", in all", tags())));
                    return sensor;
                });
    }

    /** A cache's NAME-hits and NAME-misses counters. */
    public Cache cache(String name, String answers) {
        return new Cache(
                counter(name + "-hits", answers + " answered from the cache"),
                counter(name + "-misses", answers + " that asked the service"));
    }

    public static final class Cache {
        private final Sensor hits;
        private final Sensor misses;

        public Cache(Sensor hits, Sensor misses) {
            this.hits = hits;
            this.misses = misses;
        }

        public void hit() {
            hits.record();
        }

        public void miss() {
            misses.record();
        }
    }

    public void gauge(String name, String description, Supplier<Number> value) {
        metrics.addMetric(name(name, description, tags()), (Gauge<Number>) (config, now) -> value.get());
    }

    private Sensor latency(String method) {
        Map<String, String> tags = tags("method", method);
        return sensors.computeIfAbsent(
                "latency" + tags,
                key -> {
                    Sensor sensor = metrics.sensor(group + ":" + key);
                    sensor.add(
                            new Meter(
                                    new WindowedCount(),
                                    name("calls-rate", "Calls per second", tags),
                                    name("calls-total", "Calls in all", tags)));
                    sensor.add(name("latency-avg", "Mean time of a call, ms", tags), new Avg());
                    sensor.add(name("latency-max", "Longest time of a call, ms", tags), new Max());
                    return sensor;
                });
    }

    /** Records each call of the channel it intercepts. */
    public ClientInterceptor interceptor() {
        return new ClientInterceptor() {
            @Override
            public <Q, A> ClientCall<Q, A> interceptCall(
                    MethodDescriptor<Q, A> method, CallOptions options, Channel next) {
                String name = method.getBareMethodName();
                return new SimpleForwardingClientCall<Q, A>(next.newCall(method, options)) {
                    @Override
                    public void start(Listener<A> listener, Metadata headers) {
                        long started = System.nanoTime();
                        super.start(
                                new SimpleForwardingClientCallListener<A>(listener) {
                                    @Override
                                    public void onClose(Status status, Metadata trailers) {
                                        ended(name, status, System.nanoTime() - started);
                                        super.onClose(status, trailers);
                                    }
                                },
                                headers);
                    }
                };
            }
        };
    }

    private void ended(String method, Status status, long nanos) {
        latency(method).record(nanos / 1e6);
        Status.Code code = status.getCode();
        if (code != Status.Code.OK && code != Status.Code.CANCELLED) {
            counter("errors", "Calls that failed with this code", "method", method, "code", code.name()).record();
        }
    }

    /** `stream`, its bytes added to `bytes` when the broker closes it. */
    public static InputStream counted(InputStream stream, Sensor bytes) {
        return new FilterInputStream(stream) {
            private long read;
            private boolean closed;

            @Override
            public int read() throws IOException {
                int b = super.read();
                if (b >= 0) {
                    read++;
                }
                return b;
            }

            @Override
            public int read(byte[] buffer, int from, int length) throws IOException {
                int count = super.read(buffer, from, length);
                if (count > 0) {
                    read += count;
                }
                return count;
            }

            @Override
            public long skip(long n) throws IOException {
                return super.skip(n); // skipped bytes were not fetched for the broker
            }

            @Override
            public void close() throws IOException {
                if (!closed) {
                    closed = true;
                    bytes.record(read);
                }
                super.close();
            }
        };
    }

    /** Every metric, now and later, also in the broker's registry (Kafka 4.1+), until close. */
    void mirrorTo(PluginMetrics broker) {
        metrics.addReporter(new BrokerMetrics(broker));
    }

    @Override
    public void close() {
        metrics.close();
    }
}
