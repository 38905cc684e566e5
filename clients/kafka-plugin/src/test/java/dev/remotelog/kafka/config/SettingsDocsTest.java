package dev.remotelog.kafka.config;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/**
 * docs/kafka-plugin.md's settings tables are Settings.markdown(), between two markers.
 * `make plugin-docs` (the system property remotelog.writeDocs) writes them there.
 */
public class SettingsDocsTest {
    static final Path DOCS = Path.of("../../docs/kafka-plugin.md");
    static final String BEGIN = "<!-- settings: generated from Settings.java by `make plugin-docs` -->\n";
    static final String END = "<!-- end of settings -->";

    @Test
    void theDocsTablesAreTheDefinitions() throws Exception {
        String docs = Files.readString(DOCS, StandardCharsets.UTF_8);
        int begin = docs.indexOf(BEGIN);
        int end = docs.indexOf(END);
        if (begin < 0 || end < begin) {
            throw new AssertionError(DOCS + " lacks the markers " + BEGIN.strip() + " and " + END);
        }
        String generated = docs.substring(0, begin + BEGIN.length()) + Settings.markdown() + docs.substring(end);
        if (Boolean.getBoolean("remotelog.writeDocs")) {
            Files.writeString(DOCS, generated, StandardCharsets.UTF_8);
            docs = generated;
        }
        assertEquals(generated, docs, DOCS + " differs from Settings.java: run `make plugin-docs`");
    }
}
