package dev.remotelog.kafka.config;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.cert.CertificateFactory;
import java.util.Collection;
import org.apache.kafka.common.config.ConfigException;

/** Which of a plugin's TLS files made its channel fail, as a ConfigException naming it. */
public final class TlsFiles {
    private TlsFiles() {}

    public static ConfigException blame(Settings settings, Exception failure) {
        String p = settings.prefix();
        String why = failure.getMessage() == null ? failure.toString() : failure.getMessage();
        if (!settings.tls()) {
            return new ConfigException(p + settings.role().addressKey, settings.address(), why);
        }
        String ca = certificates(settings.caFile());
        if (ca != null) {
            return new ConfigException(p + Settings.TLS_CA, settings.caFile(), ca);
        }
        if (settings.certFile().isEmpty()) {
            return new ConfigException(p + Settings.TLS_CA, settings.caFile(), why);
        }
        String cert = certificates(settings.certFile());
        if (cert != null) {
            return new ConfigException(p + Settings.TLS_CERT, settings.certFile(), cert);
        }
        // Both certificate files parse: what gRPC refused is the key, or the key and the
        // certificate are not a pair.
        return new ConfigException(
                p + Settings.TLS_KEY,
                settings.keyFile(),
                "not a PKCS#8 PEM private key of " + p + Settings.TLS_CERT + ": " + why);
    }

    /** Why `file` is not a PEM file of X.509 certificates; null if it is one. */
    static String certificates(String file) {
        try (InputStream in = Files.newInputStream(Path.of(file))) {
            Collection<? extends java.security.cert.Certificate> found =
                    CertificateFactory.getInstance("X.509").generateCertificates(in);
            if (found.isEmpty()) {
                return "holds no PEM certificate";
            }
            return null;
        } catch (IOException | GeneralSecurityException e) {
            return "not a PEM X.509 certificate file: " + e.getMessage();
        }
    }
}
