"""Kafka's RemoteLogMetadataTopicPartitioner, reproduced exactly.

partition = toPositive(murmur2(bigEndianBytes(Objects.hash(topicId.lsb,
topicId.msb, partition)))) % numMetadataTopicPartitions, with Java's int
arithmetic (32-bit wrap-around) throughout.
"""

from __future__ import annotations

from remotelog.core.model import TopicIdPartition

_MASK32 = 0xFFFFFFFF


def _to_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (seed 0x9747b28c), returning a signed 32-bit int."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & _MASK32
        k ^= k >> 24
        k = (k * m) & _MASK32
        h = (h * m) & _MASK32
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(value: int) -> int:
    """Kafka's Utils.toPositive: clears the sign bit (not abs())."""
    return value & 0x7FFFFFFF


def java_long_hash(value: int) -> int:
    """Long.hashCode: (int) (value ^ (value >>> 32))."""
    value &= 0xFFFFFFFFFFFFFFFF
    return _to_int32(value ^ (value >> 32))


def java_objects_hash(*hashes: int) -> int:
    """Objects.hash over elements whose hashCode() values are given."""
    result = 1
    for h in hashes:
        result = (31 * result + h) & _MASK32
    return _to_int32(result)


def metadata_hash(topic_id_partition: TopicIdPartition) -> int:
    """Objects.hash(topicId.getLeastSignificantBits(), getMostSignificantBits(), partition)."""
    bits = topic_id_partition.topic_id.int
    msb, lsb = bits >> 64, bits & 0xFFFFFFFFFFFFFFFF
    return java_objects_hash(java_long_hash(lsb), java_long_hash(msb), topic_id_partition.partition)


def metadata_partition(topic_id_partition: TopicIdPartition, num_partitions: int) -> int:
    """The `__remote_log_metadata` partition holding this user partition's events."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be > 0, got {num_partitions}")
    key = (metadata_hash(topic_id_partition) & _MASK32).to_bytes(4, "big")
    return to_positive(murmur2(key)) % num_partitions
