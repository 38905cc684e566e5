package dev.remotelog.kafka.util;

import static dev.remotelog.kafka.util.ObjectStoreAnswers.Meaning.BUSY;
import static dev.remotelog.kafka.util.ObjectStoreAnswers.Meaning.DONE;
import static dev.remotelog.kafka.util.ObjectStoreAnswers.Meaning.FAILED;
import static dev.remotelog.kafka.util.ObjectStoreAnswers.Meaning.GONE;
import static dev.remotelog.kafka.util.ObjectStoreAnswers.Meaning.REFUSED;
import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

public class ObjectStoreAnswersTest {
    private static String code(String body) {
        return ObjectStoreAnswers.errorCode(body);
    }

    @Test
    void eachCloudsAnswersToAPutMeanTheSame() {
        assertEquals(DONE, ObjectStoreAnswers.ofPut(200, "")); // S3, GCS
        assertEquals(DONE, ObjectStoreAnswers.ofPut(201, "")); // Azure
        assertEquals(FAILED, ObjectStoreAnswers.ofPut(400, code("<Error><Code>BadDigest</Code></Error>")));
        assertEquals(FAILED, ObjectStoreAnswers.ofPut(400, code(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>Md5Mismatch</Code><Message>x</Message></Error>")));
        assertEquals(REFUSED, ObjectStoreAnswers.ofPut(403, code("<Error><Code>AuthenticationFailed</Code></Error>")));
        assertEquals(REFUSED, ObjectStoreAnswers.ofPut(400, code("<Error><Code>ExpiredToken</Code></Error>")));
        assertEquals(BUSY, ObjectStoreAnswers.ofPut(503, code("<Error><Code>SlowDown</Code></Error>")));
        assertEquals(BUSY, ObjectStoreAnswers.ofPut(503, code("<Error><Code>ServerBusy</Code></Error>")));
        assertEquals(BUSY, ObjectStoreAnswers.ofPut(500, code("<Error><Code>OperationTimedOut</Code></Error>")));
        assertEquals(BUSY, ObjectStoreAnswers.ofPut(429, ""));
        assertEquals(FAILED, ObjectStoreAnswers.ofPut(404, code("<Error><Code>NoSuchBucket</Code></Error>")));
    }

    @Test
    void aRangedGetIsDoneOnlyBy206() {
        assertEquals(DONE, ObjectStoreAnswers.ofRangedGet(206, ""));
        assertEquals(FAILED, ObjectStoreAnswers.ofRangedGet(200, "")); // the range ignored
        assertEquals(GONE, ObjectStoreAnswers.ofRangedGet(404, code("<Error><Code>BlobNotFound</Code></Error>")));
        assertEquals(REFUSED, ObjectStoreAnswers.ofRangedGet(403, "")); // S3, Azure: expired or altered
        assertEquals(REFUSED, ObjectStoreAnswers.ofRangedGet(400, "ExpiredToken")); // GCS: expired
        assertEquals(FAILED, ObjectStoreAnswers.ofRangedGet(400, "InvalidArgument"));
        assertEquals(BUSY, ObjectStoreAnswers.ofRangedGet(429, "")); // GCS's rate limit
        assertEquals(BUSY, ObjectStoreAnswers.ofRangedGet(502, ""));
    }

    @Test
    void anErrorCodeIsReadFromAnyCloudsXml() {
        assertEquals("ExpiredToken", code("<?xml version='1.0' encoding='UTF-8'?><Error><Code>ExpiredToken</Code>"
                + "<Message>Invalid argument.</Message><Details>The provided token has expired.</Details></Error>"));
        assertEquals("", code("not xml"));
        assertEquals("", code(""));
    }
}
