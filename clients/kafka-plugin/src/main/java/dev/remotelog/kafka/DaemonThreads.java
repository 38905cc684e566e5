package dev.remotelog.kafka;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/** Thread pools of the plugin's own, so close() can end their threads: an HttpClient's
 * executor among them (HttpClient.close() exists only from Java 21). */
final class DaemonThreads {
    private DaemonThreads() {}

    /** A cached pool of daemon threads called `name`: none keeps the broker from exiting. */
    static ExecutorService cached(String name) {
        return Executors.newCachedThreadPool(
                task -> {
                    Thread thread = new Thread(task, name);
                    thread.setDaemon(true);
                    return thread;
                });
    }
}
