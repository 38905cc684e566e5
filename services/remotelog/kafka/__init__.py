"""Kafka's on-disk formats, byte-compatible with Apache Kafka: record batches and codecs."""
