package dev.remotelog.kafka.util;

import java.io.IOException;
import java.io.InputStream;

/** An InputStream that reads in bulk; a single byte is a bulk read of one. */
public abstract class BulkInputStream extends InputStream {
    @Override
    public int read() throws IOException {
        byte[] one = new byte[1];
        int count = read(one, 0, 1);
        return count < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public abstract int read(byte[] buffer, int from, int length) throws IOException;
}
