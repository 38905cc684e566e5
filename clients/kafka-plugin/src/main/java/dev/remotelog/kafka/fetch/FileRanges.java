package dev.remotelog.kafka.fetch;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.stream.Collectors;

/** Ranges of a file:// URL, a filesystem store's on this host: read from the page cache,
 * which reads ahead by itself, as LocalTieredStorage reads. Only files beneath the
 * configured roots, links resolved, are opened: a store's answer is no licence to read
 * any file of the broker's host. */
public final class FileRanges {
    private final List<Path> roots;

    FileRanges(List<String> roots) {
        this.roots = roots.stream().map(r -> Path.of(r).toAbsolutePath().normalize()).collect(Collectors.toList());
    }

    /** Bytes `start`..`end` (inclusive; null: to the end) of the file at `url`. */
    InputStream open(URI url, long start, Long end) throws IOException {
        Path path = Path.of(url).toRealPath();
        boolean beneath = false;
        for (Path root : roots) {
            beneath |= Files.isDirectory(root) && path.startsWith(root.toRealPath()) && !path.equals(root.toRealPath());
        }
        if (!beneath) {
            throw new IOException("a file:// URL outside fetch.file.url.roots: " + path);
        }
        FileChannel file = FileChannel.open(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);
        try {
            if (start > file.size()) {
                throw new IOException("the file ends before byte " + start);
            }
            file.position(start);
        } catch (IOException e) {
            file.close();
            throw e;
        }
        InputStream in = Channels.newInputStream(file);
        return end == null ? in : new Bounded(in, end - start + 1);
    }

    /** At most `remaining` bytes of a stream; closing it closes the stream. */
    private static final class Bounded extends InputStream {
        private final InputStream in;
        private long remaining;

        Bounded(InputStream in, long remaining) {
            this.in = in;
            this.remaining = remaining;
        }

        @Override
        public int read() throws IOException {
            if (remaining <= 0) {
                return -1;
            }
            int b = in.read();
            if (b >= 0) {
                remaining--;
            }
            return b;
        }

        @Override
        public int read(byte[] buffer, int from, int length) throws IOException {
            if (remaining <= 0) {
                return -1;
            }
            int count = in.read(buffer, from, (int) Math.min(length, remaining));
            if (count > 0) {
                remaining -= count;
            }
            return count;
        }

        @Override
        public void close() throws IOException {
            in.close();
        }
    }
}
