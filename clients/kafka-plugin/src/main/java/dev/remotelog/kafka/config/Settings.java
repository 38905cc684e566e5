package dev.remotelog.kafka.config;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Range;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A plugin's settings, as the broker hands them over: its `rsm.config.` or `rlmm.config.`
 * properties with the prefix stripped, beside keys the broker adds (broker.id, log.dir,
 * cluster.id, its listener), which are recognised and left alone. Each setting is defined
 * in Kafka's ConfigDef under its prefixed name, the name the operator writes, so a bad
 * value fails configure() naming it, and docs/kafka-plugin.md's table is generated from
 * the definitions (SettingsDocsTest). An unknown key is logged at WARN with the nearest
 * known one.
 */
public final class Settings {
    private static final Logger LOG = LoggerFactory.getLogger(Settings.class);

    /** Which of the two plugins: the prefix Kafka strips and the service it calls. */
    public enum Role {
        STORAGE("rsm.config.", "segment.store.address", "segment store"),
        METADATA("rlmm.config.", "metadata.manager.address", "metadata manager");

        final String prefix;
        final String addressKey;
        final String service;

        Role(String prefix, String addressKey, String service) {
            this.prefix = prefix;
            this.addressKey = addressKey;
            this.service = service;
        }

        Role other() {
            return this == STORAGE ? METADATA : STORAGE;
        }
    }

    static final String TLS_CA = "client.tls.ca.file";
    static final String TLS_CERT = "client.tls.cert.file";
    static final String TLS_KEY = "client.tls.key.file";
    static final String TOKEN_FILE = "client.auth.token.file";
    public static final String TIMEOUT = "client.timeout.ms";
    public static final String COPY_TIMEOUT = "client.copy.timeout.ms";
    public static final String CHUNK_BYTES = "copy.chunk.bytes";
    public static final String COPY_METHOD = "copy.method";
    static final String COPY_PARALLEL_PARTS = "copy.url.parallel.parts";
    public static final String COPY_PART_BYTES = "copy.url.part.bytes";
    public static final String FETCH_URLS = "fetch.urls.enabled";
    public static final String FETCH_FILE_URL_ROOTS = "fetch.file.url.roots";
    public static final String READ_AHEAD_CHUNKS = "fetch.read.ahead.chunks";
    public static final String READ_AHEAD_CHUNK_BYTES = "fetch.read.ahead.chunk.bytes";
    static final String READ_AHEAD_MAX_BYTES = "fetch.read.ahead.max.bytes";
    static final String HEDGE_PERCENTILE = "fetch.read.ahead.hedge.percentile";
    static final String LOOKUP_TIMEOUT = "client.lookup.timeout.ms";
    // The storage manager's own lookups of the segment after one being read (NextSegments).
    public static final String NEXT_SEGMENT_ADDRESS = Role.METADATA.addressKey;

    // What the broker puts beside a plugin's own settings (RemoteLogManager.configureRSM
    // and configureRLMM): never the operator's typing, so never warned about.
    private static final Set<String> BROKER_KEYS =
            Set.of("broker.id", "node.id", "cluster.id", "log.dir", "log.dirs");
    private static final String BROKER_LISTENER_PREFIX = "remote.log.metadata.common.client.";
    // Kafka's own TopicBasedRemoteLogMetadataManager's settings, left in place by an
    // operator who swapped it for remotelog's.
    private static final String KAFKA_RLMM_PREFIX = "remote.log.metadata.";

    static final long MAX_TIMEOUT_MS = 3_600_000;
    static final long MAX_COPY_TIMEOUT_MS = 86_400_000;

    private final Role role;
    private final AbstractConfig values;
    private final String token;
    private final String broker;

    private Settings(Role role, AbstractConfig values, String token, String broker) {
        this.role = role;
        this.values = values;
        this.token = token;
        this.broker = broker;
    }

    /** The id the broker gave this plugin (`broker.id`), if it gave one. */
    Optional<String> broker() {
        return Optional.ofNullable(broker);
    }

    /** Every setting of `role`, named as the operator writes it (prefix included). */
    static ConfigDef definition(Role role) {
        String p = role.prefix;
        ConfigDef def = new ConfigDef();
        def.define(
                p + role.addressKey,
                Type.STRING,
                ConfigDef.NO_DEFAULT_VALUE,
                new Address(),
                Importance.HIGH,
                "host:port of the " + role.service + ".");
        def.define(
                p + TLS_CA,
                Type.STRING,
                "",
                new ReadableFile(),
                Importance.HIGH,
                "PEM file of the CA that signed the services' certificates: set, the calls use TLS;"
                        + " empty, plaintext.");
        def.define(
                p + TLS_CERT,
                Type.STRING,
                "",
                new ReadableFile(),
                Importance.MEDIUM,
                "PEM client certificate, for services that require one (mutual TLS). Set with "
                        + p + TLS_KEY + " and " + p + TLS_CA + ".");
        def.define(
                p + TLS_KEY,
                Type.STRING,
                "",
                new ReadableFile(),
                Importance.MEDIUM,
                "PKCS#8 PEM key of " + p + TLS_CERT + ".");
        def.define(
                p + TOKEN_FILE,
                Type.STRING,
                "",
                new ReadableFile(),
                Importance.MEDIUM,
                "File holding the bearer token every call shows: the broker role's, for services"
                        + " with authorization.enabled. Read once, trimmed.");
        def.define(
                p + TIMEOUT,
                Type.LONG,
                30_000L,
                Range.between(1, MAX_TIMEOUT_MS),
                Importance.MEDIUM,
                "Deadline of each call, a fetch stream's whole life included.");
        if (role == Role.STORAGE) {
            def.define(
                    p + COPY_TIMEOUT,
                    Type.LONG,
                    600_000L,
                    Range.between(1_000, MAX_COPY_TIMEOUT_MS),
                    Importance.MEDIUM,
                    "Deadline of a segment copy; a copy that misses it fails for good, and Kafka"
                            + " deletes the attempt and copies the segment again.");
            def.define(
                    p + CHUNK_BYTES,
                    Type.INT,
                    1 << 20,
                    Range.between(4096, 4 << 20),
                    Importance.LOW,
                    "Bytes per copy message; the store refuses more than its copy.chunk.max.bytes.");
            def.define(
                    p + COPY_METHOD,
                    Type.STRING,
                    "stream",
                    ConfigDef.ValidString.in("stream", "path", "url"),
                    Importance.MEDIUM,
                    "How a segment's bytes reach the remote tier. stream: through the store's"
                            + " CopyLogSegmentData stream. path: the store reads the broker's files"
                            + " itself, by path (a store on this host whose copy.paths.allowed holds"
                            + " the log directories). url: the broker PUTs them to object storage"
                            + " itself, by the signed multipart upload the store hands out (an S3, GCS"
                            + " or Azure store). A store that cannot do path or url copies gets the stream,"
                            + " with one warning.");
            def.define(
                    p + COPY_PARALLEL_PARTS,
                    Type.INT,
                    4,
                    Range.between(1, 64),
                    Importance.LOW,
                    "Parts of one segment PUT at once with copy.method=url. Each streams from the"
                            + " segment's file, so memory does not grow with it.");
            def.define(
                    p + COPY_PART_BYTES,
                    Type.LONG,
                    25L * 1024 * 1024,
                    Range.between(5L * 1024 * 1024, 5L * 1024 * 1024 * 1024),
                    Importance.LOW,
                    "Bytes of each part of a segment's log with copy.method=url (more where S3's"
                            + " 10,000 parts would not hold it). The plugin takes each part's MD5"
                            + " before the copy starts, and the store signs it into the part's URL.");
            def.define(
                    p + FETCH_URLS,
                    Type.BOOLEAN,
                    false,
                    Importance.MEDIUM,
                    "Read segment logs and indexes from the URLs the store hands out instead of"
                            + " through its streams.");
            def.define(
                    p + FETCH_FILE_URL_ROOTS,
                    Type.LIST,
                    "",
                    Importance.LOW,
                    "Directories, comma-separated, whose files the plugin reads by the file:// URLs a"
                            + " filesystem store on this host hands out (its storage.root). A file:// URL"
                            + " outside them, or with a link out of them, is not opened: that read takes"
                            + " the stream. Empty: no file:// URL is read.");
            def.define(
                    p + READ_AHEAD_CHUNKS,
                    Type.INT,
                    8,
                    Range.between(0, 64),
                    Importance.MEDIUM,
                    "Chunks of a segment's log asked for ahead of a reader, where logs are read"
                            + " from an object store by URL: Kafka's next fetch of the partition"
                            + " then finds its bytes in memory instead of waiting out the store's"
                            + " first-byte latency. 0: no read-ahead, one ranged GET per fetch.");
            def.define(
                    p + READ_AHEAD_CHUNK_BYTES,
                    Type.INT,
                    1 << 20,
                    Range.between(64 << 10, 64 << 20),
                    Importance.LOW,
                    "Bytes of a read-ahead chunk: one ranged GET each.");
            def.define(
                    p + HEDGE_PERCENTILE,
                    Type.DOUBLE,
                    95.0,
                    Range.between(0, 100),
                    Importance.LOW,
                    "A read-ahead chunk's GET that takes longer than this percentile of the last"
                            + " 256 (once there are 20) is asked a second time, and the first answer"
                            + " is read: object storage's slowest requests are slow on one server."
                            + " 0: never.");
            def.define(
                    p + READ_AHEAD_MAX_BYTES,
                    Type.LONG,
                    64L << 20,
                    Range.between(64 << 10, 16L << 30),
                    Importance.MEDIUM,
                    "Bytes of read-ahead chunks held or in flight across the broker's reads; past"
                            + " it, no chunk is asked for ahead and the oldest are let go. A chunk a"
                            + " reader asks for is fetched anyway, so it can be passed by one chunk per"
                            + " remote.log.reader.threads.");
            def.define(
                    p + NEXT_SEGMENT_ADDRESS,
                    Type.STRING,
                    "",
                    new Address(true),
                    Importance.MEDIUM,
                    "host:port of the metadata manager, asked for the segment after one a reader"
                            + " nears the end of, so that segment's URLs and first chunks are on their"
                            + " way before Kafka crosses into it; called with this plugin's TLS and"
                            + " token settings. Empty: each segment boundary waits for Kafka's own"
                            + " lookups.");
        } else {
            def.define(
                    p + LOOKUP_TIMEOUT,
                    Type.LONG,
                    1_000L,
                    Range.between(10, MAX_TIMEOUT_MS),
                    Importance.MEDIUM,
                    "Deadline of the lookups a remote fetch makes (the segment of an offset, the"
                            + " next transaction index) and of isReady: a hung metadata manager"
                            + " fails the fetch instead of holding a reader thread for longer."
                            + " A lookup on a machine whose every core is busy takes 60 ms at"
                            + " most (bench/lookup_load.py).");
        }
        return def;
    }

    /** `configs` as the broker hands them to the `role` plugin; ConfigException naming the
     * prefixed key if one is bad. Unknown keys are logged. */
    public static Settings parse(Map<String, ?> configs, Role role) {
        for (String warning : unknown(configs, role)) {
            LOG.warn("{}", warning);
        }
        AbstractConfig values = new AbstractConfig(definition(role), prefixed(configs, role), false);
        String p = role.prefix;
        String ca = values.getString(p + TLS_CA);
        String cert = values.getString(p + TLS_CERT);
        String key = values.getString(p + TLS_KEY);
        if (cert.isEmpty() != key.isEmpty()) {
            throw new ConfigException(p + TLS_CERT, cert, "set it and " + p + TLS_KEY + " together");
        }
        if (!cert.isEmpty() && ca.isEmpty()) {
            throw new ConfigException(p + TLS_CA, ca, "a client certificate needs the services' CA");
        }
        String tokenFile = values.getString(p + TOKEN_FILE);
        String token = "";
        if (!tokenFile.isEmpty()) {
            try {
                token = Files.readString(Path.of(tokenFile), StandardCharsets.UTF_8).strip();
            } catch (IOException e) {
                throw new ConfigException(p + TOKEN_FILE, tokenFile, e.toString());
            }
            if (token.isEmpty()) {
                throw new ConfigException(p + TOKEN_FILE, tokenFile, "the file is empty");
            }
        }
        Object broker = configs.get("broker.id");
        return new Settings(role, values, token, broker == null ? null : broker.toString());
    }

    private static boolean fromBroker(String key) {
        return BROKER_KEYS.contains(key) || key.startsWith(BROKER_LISTENER_PREFIX);
    }

    private static Map<String, Object> prefixed(Map<String, ?> configs, Role role) {
        Map<String, Object> prefixed = new HashMap<>();
        configs.forEach(
                (key, value) -> {
                    if (!fromBroker(key)) {
                        prefixed.put(role.prefix + key, value);
                    }
                });
        return prefixed;
    }

    /** One line for each key of `configs` that no setting of `role` names, saying what it
     * may have meant. */
    static List<String> unknown(Map<String, ?> configs, Role role) {
        Set<String> known = definition(role).names();
        Set<String> others = definition(role.other()).names();
        List<String> lines = new ArrayList<>();
        for (String key : new TreeSet<>(configs.keySet())) {
            String name = role.prefix + key;
            if (fromBroker(key) || known.contains(name)) {
                continue;
            }
            String why;
            if (others.contains(role.other().prefix + key)) {
                why = "it is a setting of the " + role.other().service + " plugin, under " + role.other().prefix;
            } else if (role == Role.METADATA && key.startsWith(KAFKA_RLMM_PREFIX)) {
                why = "it is a setting of Kafka's TopicBasedRemoteLogMetadataManager, which this broker"
                        + " does not load (remotelog's metadata manager takes its own in its config file)";
            } else {
                String nearest = nearest(name, known);
                why = nearest == null ? "known: " + String.join(", ", new TreeSet<>(known)) : "did you mean " + nearest + "?";
            }
            lines.add(name + " is not a setting of the remotelog plugin and is ignored: " + why);
        }
        return lines;
    }

    /** The known name within a few edits of `name`, or null. */
    private static String nearest(String name, Set<String> known) {
        String best = null;
        int bestDistance = Math.max(3, name.length() / 5) + 1;
        for (String candidate : known) {
            int distance = distance(name, candidate);
            if (distance < bestDistance) {
                best = candidate;
                bestDistance = distance;
            }
        }
        return best;
    }

    /** Levenshtein distance. */
    private static int distance(String a, String b) {
        int[] previous = new int[b.length() + 1];
        int[] current = new int[b.length() + 1];
        for (int j = 0; j <= b.length(); j++) {
            previous[j] = j;
        }
        for (int i = 1; i <= a.length(); i++) {
            current[0] = i;
            for (int j = 1; j <= b.length(); j++) {
                int substitution = previous[j - 1] + (a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1);
                current[j] = Math.min(substitution, Math.min(previous[j], current[j - 1]) + 1);
            }
            int[] swap = previous;
            previous = current;
            current = swap;
        }
        return previous[b.length()];
    }

    /** docs/kafka-plugin.md's settings tables, one per plugin. */
    static String markdown() {
        StringBuilder out = new StringBuilder();
        for (Role role : Role.values()) {
            out.append("| `").append(role.prefix).append("` key | type | default | valid | meaning |\n");
            out.append("|---|---|---|---|---|\n");
            for (ConfigDef.ConfigKey key : definition(role).configKeys().values()) {
                Object fallback = key.defaultValue;
                String shown =
                        !key.hasDefault() ? "required" : "".equals(fallback) ? "none" : String.valueOf(fallback);
                out.append("| `")
                        .append(key.name.substring(role.prefix.length()))
                        .append("` | ")
                        .append(key.type.toString().toLowerCase(java.util.Locale.ROOT))
                        .append(" | ")
                        .append(shown)
                        .append(" | ")
                        .append(key.validator != null ? key.validator.toString() : key.type == Type.BOOLEAN ? "true, false" : "")
                        .append(" | ")
                        .append(key.documentation)
                        .append(" |\n");
            }
            out.append('\n');
        }
        return out.toString();
    }

    public Role role() {
        return role;
    }

    String prefix() {
        return role.prefix;
    }

    public String address() {
        return values.getString(role.prefix + role.addressKey);
    }

    /** The storage manager's metadata manager, for its next-segment lookups, if set. */
    public Optional<String> nextSegmentAddress() {
        if (role != Role.STORAGE) {
            return Optional.empty();
        }
        String address = values.getString(role.prefix + NEXT_SEGMENT_ADDRESS);
        return address.isEmpty() ? Optional.empty() : Optional.of(address);
    }

    public String caFile() {
        return values.getString(role.prefix + TLS_CA);
    }

    public String certFile() {
        return values.getString(role.prefix + TLS_CERT);
    }

    public String keyFile() {
        return values.getString(role.prefix + TLS_KEY);
    }

    public String token() {
        return token;
    }

    public long timeoutMs() {
        return values.getLong(role.prefix + TIMEOUT);
    }

    public long copyTimeoutMs() {
        return values.getLong(role.prefix + COPY_TIMEOUT);
    }

    public int chunkBytes() {
        return values.getInt(role.prefix + CHUNK_BYTES);
    }

    public String copyMethod() {
        return values.getString(role.prefix + COPY_METHOD);
    }

    public int copyParallelParts() {
        return values.getInt(role.prefix + COPY_PARALLEL_PARTS);
    }

    public long copyPartBytes() {
        return values.getLong(role.prefix + COPY_PART_BYTES);
    }

    public List<String> fetchFileUrlRoots() {
        return values.getList(role.prefix + FETCH_FILE_URL_ROOTS);
    }

    public boolean fetchUrls() {
        return values.getBoolean(role.prefix + FETCH_URLS);
    }

    public int readAheadChunks() {
        return values.getInt(role.prefix + READ_AHEAD_CHUNKS);
    }

    public int readAheadChunkBytes() {
        return values.getInt(role.prefix + READ_AHEAD_CHUNK_BYTES);
    }

    public double hedgePercentile() {
        return values.getDouble(role.prefix + HEDGE_PERCENTILE);
    }

    public long readAheadMaxBytes() {
        return values.getLong(role.prefix + READ_AHEAD_MAX_BYTES);
    }

    public long lookupTimeoutMs() {
        return Math.min(values.getLong(role.prefix + LOOKUP_TIMEOUT), timeoutMs());
    }

    public boolean tls() {
        return !caFile().isEmpty();
    }

    /** host:port or [IPv6 address]:port, the port in 1..65535. */
    private static final class Address implements ConfigDef.Validator {
        private final boolean optional;

        Address() {
            this(false);
        }

        /** `optional`: empty is allowed too. */
        Address(boolean optional) {
            this.optional = optional;
        }

        @Override
        public void ensureValid(String name, Object value) {
            String address = value == null ? "" : value.toString();
            if (optional && address.isEmpty()) {
                return;
            }
            if (!address.matches("(\\[[0-9A-Fa-f:.]+\\]|[^\\s:/\\[\\]]+):\\d{1,5}")
                    || Integer.parseInt(address.substring(address.lastIndexOf(':') + 1)) < 1
                    || Integer.parseInt(address.substring(address.lastIndexOf(':') + 1)) > 65535) {
                throw new ConfigException(name, value, "expected host:port");
            }
        }

        @Override
        public String toString() {
            return optional ? "host:port, or empty" : "host:port";
        }
    }

    /** Empty, or a file this broker can read. */
    private static final class ReadableFile implements ConfigDef.Validator {
        @Override
        public void ensureValid(String name, Object value) {
            String path = value == null ? "" : value.toString();
            if (!path.isEmpty() && !Files.isReadable(Path.of(path))) {
                throw new ConfigException(name, value, "not a readable file");
            }
        }

        @Override
        public String toString() {
            return "a readable file";
        }
    }
}
