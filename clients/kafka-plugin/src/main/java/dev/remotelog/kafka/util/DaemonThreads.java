package dev.remotelog.kafka.util;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/** Thread pools of the plugin's own, so close() can end their threads: an HttpClient's
 * executor among them (HttpClient.close() exists only from Java 21). */
public final class DaemonThreads {
    private DaemonThreads() {}

    /** A cached pool of daemon threads called `name`: none keeps the broker from exiting. */
    public static ExecutorService cached(String name) {
        return Executors.newCachedThreadPool(named(name));
    }

    /** The same, with at most `max` threads; a task past them runs on its caller's. */
    public static ExecutorService bounded(String name, int max) {
        return new ThreadPoolExecutor(
                0, max, 60, TimeUnit.SECONDS, new SynchronousQueue<>(), named(name),
                new ThreadPoolExecutor.CallerRunsPolicy());
    }

    private static ThreadFactory named(String name) {
        return task -> {
            Thread thread = new Thread(task, name);
            thread.setDaemon(true);
            return thread;
        };
    }
}
