package dev.remotelog.kafka.fetch;

import static java.nio.charset.StandardCharsets.UTF_8;

import dev.remotelog.kafka.util.DaemonThreads;
import dev.remotelog.kafka.util.ObjectStoreAnswers;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;

/**
 * The source of the URL read pipeline: ranged GETs of an object on one HTTP client, its
 * threads started at the first GET. Each answer is a 206 or an exception that says what
 * the layers above do with it: Unavailable (ask again later), Refused (the URL is no
 * good: ask the store for a new one), RemoteResourceNotFoundException (the object is
 * gone), any other IOException (the endpoint cannot be read: take the stream).
 */
public final class HttpRanges {
    /** An answer worth asking again after a pause: a busy store (ObjectStoreAnswers). */
    static final class Unavailable extends IOException {
        Unavailable(int status) {
            super("HTTP " + status + " to a ranged GET");
        }
    }

    /** A URL the server will not honour again (expired, or signed for another key). */
    static final class Refused extends IOException {
        Refused(String message) {
            super(message);
        }
    }

    /** Enough of an error's body for its code. */
    private static final int ERROR_BODY_BYTES = 4096;

    private final long timeoutMs;
    private HttpClient http;
    private ExecutorService threads;

    /** Each GET answers within `timeoutMs`, headers and first bytes. */
    HttpRanges(long timeoutMs) {
        this.timeoutMs = timeoutMs;
    }

    /** The answer to a GET of bytes `start`..`end` (null: to the end) of `url`. */
    HttpResponse<InputStream> get(URI url, RemoteLogSegmentId segment, long start, Long end)
            throws IOException, RemoteResourceNotFoundException {
        HttpRequest request =
                HttpRequest.newBuilder(url)
                        .timeout(Duration.ofMillis(timeoutMs))
                        .header("Range", "bytes=" + start + "-" + (end == null ? "" : end))
                        .build();
        HttpResponse<InputStream> response;
        try {
            response = client().send(request, HttpResponse.BodyHandlers.ofInputStream());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        }
        int status = response.statusCode();
        if (status == 206) {
            return response;
        }
        String code = "";
        try (InputStream body = response.body()) {
            if (ObjectStoreAnswers.needsCode(status)) {
                code = ObjectStoreAnswers.errorCode(new String(body.readNBytes(ERROR_BODY_BYTES), UTF_8));
            }
        }
        switch (ObjectStoreAnswers.ofRangedGet(status, code)) {
            case GONE:
                throw new RemoteResourceNotFoundException(segment + ": its log object is gone");
            case REFUSED:
                throw new Refused("its URL was refused (" + status + (code.isEmpty() ? "" : " " + code) + ")");
            case BUSY:
                throw new Unavailable(status);
            default:
                // 200 would be the whole object: a server that ignored the range.
                throw new IOException("HTTP " + status + " to a ranged GET");
        }
    }

    /** The last byte an answer's `Content-Range: bytes first-last/size` covers, or null. */
    static Long lastByte(HttpResponse<?> response) {
        String range = response.headers().firstValue("Content-Range").orElse("");
        int dash = range.indexOf('-');
        int slash = range.indexOf('/');
        if (!range.startsWith("bytes ") || dash < 0 || slash < dash) {
            return null;
        }
        try {
            return Long.parseLong(range.substring(dash + 1, slash).trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private synchronized HttpClient client() {
        if (http == null) {
            threads = DaemonThreads.cached("remotelog-fetch-urls");
            http =
                    HttpClient.newBuilder()
                            .executor(threads)
                            .connectTimeout(Duration.ofMillis(Math.min(timeoutMs, 3_000)))
                            .build();
        }
        return http;
    }

    /** Ends the client's threads: GETs under way fail. */
    synchronized void close() {
        http = null;
        if (threads != null) {
            threads.shutdownNow();
            threads = null;
        }
    }
}
