package dev.remotelog.kafka.util;

import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What an object store's answer to a signed URL means, whichever cloud signed it: S3,
 * GCS (V4 URLs, XML API) and Azure (SAS) say the same things with other statuses and
 * codes. A refused URL is one to sign again (S3 and Azure answer an expired or altered
 * one 403; GCS answers an expired one 400 ExpiredToken); a busy store is one to ask again
 * after a pause (S3's 503 SlowDown, GCS's 429, Azure's 503 ServerBusy and 500
 * OperationTimedOut); a PUT is done at 200 (S3, GCS) or 201 (Azure).
 */
public final class ObjectStoreAnswers {
    public enum Meaning {
        DONE,
        BUSY,
        REFUSED,
        GONE,
        FAILED
    }

    /** 400s that are about the URL's signature, not the request's bytes. */
    private static final Set<String> REFUSED_400S =
            Set.of("ExpiredToken", "AuthenticationFailed", "AuthenticationRequired", "InvalidAuthenticationInfo",
                    "AuthorizationQueryParametersError");

    /** Every cloud's XML error: {@code <Code>..</Code>} (S3, GCS, Azure alike). */
    private static final Pattern CODE = Pattern.compile("<Code>([A-Za-z0-9]+)</Code>");

    private ObjectStoreAnswers() {}

    /** The answer to a PUT of an object, a part or a block. */
    public static Meaning ofPut(int status, String errorCode) {
        if (status == 200 || status == 201) {
            return Meaning.DONE;
        }
        return ofFailure(status, errorCode);
    }

    /** The answer to a ranged GET: only 206 is the range (200 would be the whole object). */
    public static Meaning ofRangedGet(int status, String errorCode) {
        if (status == 206) {
            return Meaning.DONE;
        }
        if (status == 404) {
            return Meaning.GONE;
        }
        return ofFailure(status, errorCode);
    }

    private static Meaning ofFailure(int status, String errorCode) {
        if (status == 403 || (status == 400 && REFUSED_400S.contains(errorCode))) {
            return Meaning.REFUSED;
        }
        if (status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504) {
            return Meaning.BUSY;
        }
        return Meaning.FAILED;
    }

    /** Whether a status's meaning hangs on its error code (only 400s' do). */
    public static boolean needsCode(int status) {
        return status == 400;
    }

    /** The error code of an XML error body, or "" if it has none. */
    public static String errorCode(String body) {
        Matcher code = CODE.matcher(body);
        return code.find() ? code.group(1) : "";
    }
}
