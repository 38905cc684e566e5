package dev.remotelog.kafka;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;

/**
 * A plugin's settings, as the broker hands them over: its `rsm.config.` or `rlmm.config.`
 * properties with the prefix stripped, beside keys the broker adds (broker.id, log.dir,
 * cluster.id...), which are left alone. A missing or bad setting fails configure(),
 * naming the key as the operator wrote it, prefix included.
 */
final class Settings {
    private final String address;
    private final String caFile;
    private final String certFile;
    private final String keyFile;
    private final String token;
    private final long timeoutMs;
    private final long copyTimeoutMs;
    private final int chunkBytes;
    private final boolean fetchUrls;

    Settings(
            String address,
            String caFile,
            String certFile,
            String keyFile,
            String token,
            long timeoutMs,
            long copyTimeoutMs,
            int chunkBytes,
            boolean fetchUrls) {
        this.address = address;
        this.caFile = caFile;
        this.certFile = certFile;
        this.keyFile = keyFile;
        this.token = token;
        this.timeoutMs = timeoutMs;
        this.copyTimeoutMs = copyTimeoutMs;
        this.chunkBytes = chunkBytes;
        this.fetchUrls = fetchUrls;
    }

    String address() {
        return address;
    }

    String caFile() {
        return caFile;
    }

    String certFile() {
        return certFile;
    }

    String keyFile() {
        return keyFile;
    }

    String token() {
        return token;
    }

    long timeoutMs() {
        return timeoutMs;
    }

    long copyTimeoutMs() {
        return copyTimeoutMs;
    }

    int chunkBytes() {
        return chunkBytes;
    }

    boolean fetchUrls() {
        return fetchUrls;
    }

    static final String TLS_CA = "client.tls.ca.file";
    static final String TLS_CERT = "client.tls.cert.file";
    static final String TLS_KEY = "client.tls.key.file";
    static final String TOKEN_FILE = "client.auth.token.file";
    static final String TIMEOUT = "client.timeout.ms";
    static final String COPY_TIMEOUT = "client.copy.timeout.ms";
    static final String CHUNK_BYTES = "copy.chunk.bytes";
    static final String FETCH_URLS = "fetch.urls.enabled";

    static Settings parse(Map<String, ?> configs, String prefix, String addressKey) {
        Reader read = new Reader(configs, prefix);
        String address = read.string(addressKey, null);
        if (!address.matches("[^\\s:/]+:\\d{1,5}") || port(address) < 1 || port(address) > 65535) {
            throw new ConfigException(prefix + addressKey, address, "expected host:port");
        }
        String ca = read.file(TLS_CA);
        String cert = read.file(TLS_CERT);
        String key = read.file(TLS_KEY);
        if (cert.isEmpty() != key.isEmpty()) {
            throw new ConfigException(
                    prefix + TLS_CERT, cert, "set it and " + prefix + TLS_KEY + " together");
        }
        if (!cert.isEmpty() && ca.isEmpty()) {
            throw new ConfigException(
                    prefix + TLS_CA, ca, "a client certificate needs the services' CA");
        }
        String tokenFile = read.file(TOKEN_FILE);
        String token = "";
        if (!tokenFile.isEmpty()) {
            try {
                token = Files.readString(Path.of(tokenFile), StandardCharsets.UTF_8).strip();
            } catch (IOException e) {
                throw new ConfigException(prefix + TOKEN_FILE, tokenFile, e.toString());
            }
            if (token.isEmpty()) {
                throw new ConfigException(prefix + TOKEN_FILE, tokenFile, "the file is empty");
            }
        }
        return new Settings(
                address,
                ca,
                cert,
                key,
                token,
                read.number(TIMEOUT, 30_000, 1, Long.MAX_VALUE),
                read.number(COPY_TIMEOUT, 600_000, 1, Long.MAX_VALUE),
                (int) read.number(CHUNK_BYTES, 1 << 20, 4096, 4 << 20),
                read.flag(FETCH_URLS, false));
    }

    boolean tls() {
        return !caFile.isEmpty();
    }

    private static int port(String address) {
        return Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
    }

    private static final class Reader {
        private final Map<String, ?> configs;
        private final String prefix;

        Reader(Map<String, ?> configs, String prefix) {
            this.configs = configs;
            this.prefix = prefix;
        }

        String string(String key, String fallback) {
            Object value = configs.get(key);
            if (value == null || value.toString().isBlank()) {
                if (fallback == null) {
                    throw new ConfigException(prefix + key, null, "missing: the plugin needs it");
                }
                return fallback;
            }
            return value.toString().strip();
        }

        String file(String key) {
            String path = string(key, "");
            if (!path.isEmpty() && !Files.isReadable(Path.of(path))) {
                throw new ConfigException(prefix + key, path, "not a readable file");
            }
            return path;
        }

        boolean flag(String key, boolean fallback) {
            String text = string(key, Boolean.toString(fallback)).toLowerCase(java.util.Locale.ROOT);
            if (!text.equals("true") && !text.equals("false")) {
                throw new ConfigException(prefix + key, text, "must be true or false");
            }
            return text.equals("true");
        }

        long number(String key, long fallback, long min, long max) {
            String text = string(key, Long.toString(fallback));
            long value;
            try {
                value = Long.parseLong(text);
            } catch (NumberFormatException e) {
                throw new ConfigException(prefix + key, text, "not a whole number");
            }
            if (value < min || value > max) {
                throw new ConfigException(
                        prefix + key, text, "must be in " + min + ".." + max);
            }
            return value;
        }
    }
}
