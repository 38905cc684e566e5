package dev.remotelog.kafka.config;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.remotelog.kafka.rpc.Channels;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

public class SettingsTest {
    static final Settings.Role STORAGE = Settings.Role.STORAGE;
    static final Settings.Role METADATA = Settings.Role.METADATA;
    static final String ADDRESS = STORAGE.addressKey;

    static Map<String, Object> configs(Object... pairs) {
        Map<String, Object> configs = new HashMap<>();
        // What the broker adds beside the plugin's own settings: left alone.
        configs.put("broker.id", 1);
        configs.put("log.dir", "/var/lib/kafka");
        configs.put("cluster.id", "abc");
        configs.put("remote.log.metadata.common.client.bootstrap.servers", "localhost:9092");
        for (int i = 0; i < pairs.length; i += 2) {
            configs.put((String) pairs[i], pairs[i + 1]);
        }
        return configs;
    }

    /** Settings of an in-process service, for the other tests. */
    public static Settings inProcess(Settings.Role role, Object... pairs) {
        Map<String, Object> configs = configs(pairs);
        configs.put(role.addressKey, "in-process:1");
        return Settings.parse(configs, role);
    }

    static String refusal(Map<String, Object> configs) {
        return refusal(configs, STORAGE);
    }

    static String refusal(Map<String, Object> configs, Settings.Role role) {
        return assertThrows(ConfigException.class, () -> Settings.parse(configs, role)).getMessage();
    }

    static String resource(String name) throws URISyntaxException {
        return Path.of(SettingsTest.class.getResource("/tls/" + name).toURI()).toString();
    }

    @Test
    void defaultsNeedOnlyTheAddress() {
        Settings settings = Settings.parse(configs(ADDRESS, "store:7301"), STORAGE);
        assertEquals("store:7301", settings.address());
        // An IPv6 address, bracketed as in a URI.
        assertEquals("[::1]:7301", Settings.parse(configs(ADDRESS, "[::1]:7301"), STORAGE).address());
        assertEquals(30_000, settings.timeoutMs());
        assertEquals(600_000, settings.copyTimeoutMs());
        assertEquals(1 << 20, settings.chunkBytes());
        assertEquals(false, settings.tls());
        assertEquals("", settings.token());
        assertEquals(false, settings.fetchUrls());
        assertTrue(Settings.parse(configs(ADDRESS, "a:1", Settings.FETCH_URLS, "TRUE"), STORAGE).fetchUrls());
        Settings metadata = Settings.parse(configs(METADATA.addressKey, "rlmm:7302"), METADATA);
        assertEquals(1_000, metadata.lookupTimeoutMs());
        // A lookup never waits longer than any call may.
        assertEquals(
                100,
                Settings.parse(configs(METADATA.addressKey, "a:1", Settings.TIMEOUT, "100", Settings.LOOKUP_TIMEOUT, "500"), METADATA)
                        .lookupTimeoutMs());
    }

    @Test
    void eachBadSettingIsRefusedNamingItsKeyWithThePrefix() {
        assertTrue(refusal(configs()).contains("rsm.config.segment.store.address"));
        assertTrue(refusal(configs(), METADATA).contains("rlmm.config.metadata.manager.address"));
        assertTrue(refusal(configs(ADDRESS, "store")).contains("expected host:port"));
        assertTrue(refusal(configs(ADDRESS, "store:99999")).contains("rsm.config.segment.store.address"));
        assertTrue(refusal(configs(ADDRESS, "::1:7301")).contains("expected host:port"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TIMEOUT, "soon")).contains("rsm.config.client.timeout.ms"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TIMEOUT, "0")).contains("at least 1"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.CHUNK_BYTES, "100")).contains("rsm.config.copy.chunk.bytes"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TLS_CA, "/no/such.pem")).contains("rsm.config.client.tls.ca.file"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TOKEN_FILE, "/no/token")).contains("rsm.config.client.auth.token.file"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.FETCH_URLS, "yes")).contains("rsm.config.fetch.urls.enabled"));
        assertTrue(
                refusal(configs(METADATA.addressKey, "a:1", Settings.LOOKUP_TIMEOUT, "5"), METADATA)
                        .contains("rlmm.config.client.lookup.timeout.ms"));
    }

    @Test
    void aCopyDeadlineCannotOverflow() {
        // Long.MAX_VALUE plus the copy's grace would wrap to a deadline in the past.
        String refused = refusal(configs(ADDRESS, "a:1", Settings.COPY_TIMEOUT, Long.toString(Long.MAX_VALUE)));
        assertTrue(refused.contains("rsm.config.client.copy.timeout.ms"), refused);
        assertTrue(refused.contains("no more than " + Settings.MAX_COPY_TIMEOUT_MS), refused);
        assertEquals(
                Settings.MAX_COPY_TIMEOUT_MS,
                Settings.parse(configs(ADDRESS, "a:1", Settings.COPY_TIMEOUT, Settings.MAX_COPY_TIMEOUT_MS), STORAGE)
                        .copyTimeoutMs());
    }

    @Test
    void unknownKeysAreNamedWithWhatTheyMayHaveMeant() {
        List<String> lines =
                Settings.unknown(
                        configs(
                                ADDRESS, "a:1",
                                "client.timout.ms", "5",
                                "fetch.url.enabled", "true",
                                "client.lookup.timeout.ms", "500",
                                "colour", "blue"),
                        STORAGE);
        assertEquals(4, lines.size(), lines.toString());
        assertTrue(lines.get(0).endsWith("a setting of the metadata manager plugin, under rlmm.config."), lines.get(0));
        assertEquals(
                "rsm.config.client.timout.ms is not a setting of the remotelog plugin and is ignored:"
                        + " did you mean rsm.config.client.timeout.ms?",
                lines.get(1));
        assertTrue(lines.get(2).startsWith("rsm.config.colour is not a setting"), lines.get(2));
        assertTrue(lines.get(2).contains("known: rsm.config.client.auth.token.file,"), lines.get(2));
        assertTrue(lines.get(3).endsWith("did you mean rsm.config.fetch.urls.enabled?"), lines.get(3));

        List<String> metadata =
                Settings.unknown(
                        configs(
                                METADATA.addressKey, "a:1",
                                "copy.chunk.bytes", "4096",
                                "remote.log.metadata.topic.replication.factor", "3"),
                        METADATA);
        assertEquals(2, metadata.size(), metadata.toString());
        assertTrue(metadata.get(0).endsWith("a setting of the segment store plugin, under rsm.config."));
        assertTrue(metadata.get(1).contains("Kafka's TopicBasedRemoteLogMetadataManager"), metadata.get(1));
        // The keys the broker adds are never the operator's typing.
        assertEquals(List.of(), Settings.unknown(configs(ADDRESS, "a:1"), STORAGE));
    }

    @Test
    void aCertificateNeedsItsKeyAndTheCa() throws Exception {
        String cert = resource("cert.pem");
        String key = resource("key.pem");
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TLS_CERT, cert)).contains("rsm.config.client.tls.cert.file"));
        assertTrue(
                refusal(configs(ADDRESS, "a:1", Settings.TLS_CERT, cert, Settings.TLS_KEY, key))
                        .contains("rsm.config.client.tls.ca.file"));
    }

    /** The ConfigException a channel over these TLS files fails with, or null if it opens. */
    static ConfigException tlsRefusal(String ca, String cert, String key) {
        Settings settings =
                Settings.parse(
                        configs(ADDRESS, "a:1", Settings.TLS_CA, ca, Settings.TLS_CERT, cert, Settings.TLS_KEY, key),
                        STORAGE);
        try {
            Channels.close(Channels.open(settings));
            return null;
        } catch (ConfigException e) {
            return e;
        }
    }

    @Test
    void aTlsFailureNamesTheFileThatIsWrong(@TempDir Path directory) throws Exception {
        String cert = resource("cert.pem");
        String key = resource("key.pem");
        String garbage = Files.writeString(directory.resolve("garbage.pem"), "not PEM at all\n").toString();
        assertEquals(null, tlsRefusal(cert, cert, key)); // the pair, and itself as its CA

        String badCa = tlsRefusal(garbage, cert, key).getMessage();
        assertTrue(badCa.contains("rsm.config.client.tls.ca.file"), badCa);
        String badCert = tlsRefusal(cert, garbage, key).getMessage();
        assertTrue(badCert.contains("rsm.config.client.tls.cert.file"), badCert);
        String badKey = tlsRefusal(cert, cert, garbage).getMessage();
        assertTrue(badKey.contains("rsm.config.client.tls.key.file"), badKey);
        String certAsKey = tlsRefusal(cert, cert, cert).getMessage();
        assertTrue(certAsKey.contains("rsm.config.client.tls.key.file"), certAsKey);
    }

    @Test
    void theTokenIsReadOnceTrimmed(@TempDir Path directory) throws Exception {
        Path token = Files.writeString(directory.resolve("token"), "  s3cret\n");
        Settings settings = Settings.parse(configs(ADDRESS, "a:1", Settings.TOKEN_FILE, token.toString()), STORAGE);
        assertEquals("s3cret", settings.token());
        Files.writeString(token, "\n");
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TOKEN_FILE, token.toString())).contains("the file is empty"));
    }
}
