package dev.remotelog.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SettingsTest {
    static final String PREFIX = RemotelogStorageManager.PREFIX;
    static final String ADDRESS = RemotelogStorageManager.ADDRESS;

    static Map<String, Object> configs(Object... pairs) {
        Map<String, Object> configs = new HashMap<>();
        // What the broker adds beside the plugin's own settings: left alone.
        configs.put("broker.id", 1);
        configs.put("log.dir", "/var/lib/kafka");
        for (int i = 0; i < pairs.length; i += 2) {
            configs.put((String) pairs[i], pairs[i + 1]);
        }
        return configs;
    }

    static String refusal(Map<String, Object> configs) {
        return assertThrows(ConfigException.class, () -> Settings.parse(configs, PREFIX, ADDRESS))
                .getMessage();
    }

    @Test
    void defaultsNeedOnlyTheAddress() {
        Settings settings = Settings.parse(configs(ADDRESS, "store:7301"), PREFIX, ADDRESS);
        assertEquals("store:7301", settings.address());
        assertEquals(30_000, settings.timeoutMs());
        assertEquals(600_000, settings.copyTimeoutMs());
        assertEquals(1 << 20, settings.chunkBytes());
        assertEquals(false, settings.tls());
        assertEquals("", settings.token());
        assertEquals(false, settings.fetchUrls());
        assertTrue(Settings.parse(configs(ADDRESS, "a:1", Settings.FETCH_URLS, "TRUE"), PREFIX, ADDRESS).fetchUrls());
    }

    @Test
    void eachBadSettingIsRefusedNamingItsKeyWithThePrefix() {
        assertTrue(refusal(configs()).contains("rsm.config.segment.store.address"));
        assertTrue(refusal(configs(ADDRESS, "store")).contains("expected host:port"));
        assertTrue(refusal(configs(ADDRESS, "store:99999")).contains("rsm.config.segment.store.address"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TIMEOUT, "soon")).contains("rsm.config.client.timeout.ms"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TIMEOUT, "0")).contains("must be in 1.."));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.CHUNK_BYTES, "100")).contains("rsm.config.copy.chunk.bytes"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TLS_CA, "/no/such.pem")).contains("rsm.config.client.tls.ca.file"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TOKEN_FILE, "/no/token")).contains("rsm.config.client.auth.token.file"));
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.FETCH_URLS, "yes")).contains("rsm.config.fetch.urls.enabled"));
    }

    @Test
    void aCertificateNeedsItsKeyAndTheCa(@TempDir Path directory) throws Exception {
        Path cert = Files.writeString(directory.resolve("cert.pem"), "x");
        Path key = Files.writeString(directory.resolve("key.pem"), "x");
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TLS_CERT, cert.toString())).contains("rsm.config.client.tls.cert.file"));
        assertTrue(
                refusal(configs(ADDRESS, "a:1", Settings.TLS_CERT, cert.toString(), Settings.TLS_KEY, key.toString()))
                        .contains("rsm.config.client.tls.ca.file"));
    }

    @Test
    void theTokenIsReadOnceTrimmed(@TempDir Path directory) throws Exception {
        Path token = Files.writeString(directory.resolve("token"), "  s3cret\n");
        Settings settings = Settings.parse(configs(ADDRESS, "a:1", Settings.TOKEN_FILE, token.toString()), PREFIX, ADDRESS);
        assertEquals("s3cret", settings.token());
        Files.writeString(token, "\n");
        assertTrue(refusal(configs(ADDRESS, "a:1", Settings.TOKEN_FILE, token.toString())).contains("the file is empty"));
    }
}
