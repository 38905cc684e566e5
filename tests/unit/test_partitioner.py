"""Kafka's RemoteLogMetadataTopicPartitioner, checked three ways.

murmur2: the vectors of Kafka's UtilsTest.testMurmur2, and kafka-python's
independent implementation (which returns the same hash as an unsigned int).
Objects.hash: derived by hand with Java's rules (Long.hashCode(v) =
(int)(v ^ (v >>> 32)); result = 31 * result + h, wrapping at 32 bits).
"""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from remotelog.core.model import TopicIdPartition
from remotelog.core.partitioner import (
    java_long_hash,
    metadata_hash,
    metadata_partition,
    murmur2,
    to_positive,
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_kafka_utils_test_vectors(data, expected):
    assert murmur2(data) == expected


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_to_positive_clears_the_sign_bit_rather_than_negating():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_objects_hash_derived_by_hand_is_negative():
    # msb = 0x0001020304050607 -> 0x04050607 ^ 0x00010203 = 0x04040404 = 67372036
    # lsb = 0x08090a0b0c0d0e0f -> 0x0c0d0e0f ^ 0x08090a0b = 0x04040404 = 67372036
    # r = 1; r = 31 + 67372036 = 67372067
    # r = 31 * 67372067 + 67372036 = 2155906113 -> wraps to -2139061183
    # r = 31 * -2139061183 + 3 = -66310896670 -> mod 2^32 -> -1886387230
    tip = TopicIdPartition(uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f"), "t", 3)
    assert java_long_hash(0x0001020304050607) == 0x04040404
    assert metadata_hash(tip) == -1886387230
    # The partitioner hashes the big-endian bytes of that int: 0x8f9003e2.
    expected = (kafka_python_murmur2(bytes.fromhex("8f9003e2")) & 0x7FFFFFFF) % 50
    assert metadata_partition(tip, 50) == expected


def test_negative_long_hashes():
    # msb = -1 (all ones): Long.hashCode(-1L) = (int)(0xffffffffffffffff ^ 0x00000000ffffffff) = 0
    # lsb = 0: 0. Objects.hash(0, 0, 7) = ((31 + 0) * 31 + 0) * 31 + 7 = 29798
    tip = TopicIdPartition(uuid.UUID(int=(2**64 - 1) << 64), "t", 7)
    assert java_long_hash(-1) == 0
    assert metadata_hash(tip) == 29798
    # lsb = 0x8000000000000000 (Long.MIN_VALUE): hashCode = (int)0x8000000080000000 = -2^31
    assert java_long_hash(-(2**63)) == -(2**31)


@given(st.uuids(), st.integers(0, 2**31 - 1), st.integers(1, 500))
def test_partition_is_in_range_and_stable(topic_id, partition, count):
    tip = TopicIdPartition(topic_id, "topic", partition)
    result = metadata_partition(tip, count)
    assert 0 <= result < count
    assert metadata_partition(TopicIdPartition(topic_id, "renamed", partition), count) == result


def test_partition_count_must_be_positive():
    tip = TopicIdPartition(uuid.UUID(int=1), "t", 0)
    with pytest.raises(ValueError, match="num_partitions must be > 0"):
        metadata_partition(tip, 0)
