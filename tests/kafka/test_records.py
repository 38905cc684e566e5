"""Record batches v2 against real broker-written segments and an independent decoder."""

import struct

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.records import (
    CorruptBatchError,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
    parse_control_record,
)


def segments(kafka_logs, name):
    return sorted((kafka_logs / name).glob("*.log"))


@pytest.mark.parametrize(
    ("name", "batches", "records", "last_offset"),
    [("timeindex_test", 30_565, 30_565, 30_564), ("test_topic_a-0", 45, 10_995, 10_994)],
)
def test_real_segments_decode_with_valid_crcs(kafka_logs, name, batches, records, last_offset):
    seen_batches = seen_records = 0
    expected_offset = 0
    for path in segments(kafka_logs, name):
        data = path.read_bytes()
        for header in iter_batches(data, source=str(path)):
            seen_batches += 1
            assert header.base_offset == expected_offset
            decoded = decode_records(data, header)
            assert [r.offset for r in decoded] == list(
                range(header.base_offset, header.last_offset + 1)
            )
            seen_records += len(decoded)
            expected_offset = header.last_offset + 1
    assert (seen_batches, seen_records, expected_offset - 1) == (batches, records, last_offset)


def test_timeindex_records_have_the_documented_contents(kafka_logs):
    path = segments(kafka_logs, "timeindex_test")[0]
    data = path.read_bytes()
    for header in list(iter_batches(data))[:500]:
        (record,) = decode_records(data, header)
        assert record.key == str(record.offset).encode()
        assert record.value == f"kafkaVal-{record.offset}".encode()
        assert [k for k, _ in record.headers] == ["header1", "header2"]
        assert header.producer_id == 0


def test_rebuilding_a_real_batch_gives_the_same_bytes(kafka_logs):
    for name in ("timeindex_test", "test_topic_a-0"):
        path = segments(kafka_logs, name)[0]
        data = path.read_bytes()
        for header in list(iter_batches(data))[:50]:
            rebuilt = build_batch(
                decode_records(data, header),
                partition_leader_epoch=header.partition_leader_epoch,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
            )
            assert rebuilt == data[header.position : header.position + header.size]


def test_kafka_python_decodes_the_real_segments_identically(kafka_logs):
    path = segments(kafka_logs, "test_topic_a-0")[0]
    data = path.read_bytes()
    for header in iter_batches(data):
        theirs = DefaultRecordBatch(
            bytearray(data[header.position : header.position + header.size])
        )
        assert theirs.validate_crc()
        ours = decode_records(data, header)
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
            (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in ours
        ]


CODECS = list(CompressionType)
keys = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)


@st.composite
def record_lists(draw):
    base = draw(st.integers(0, 2**40))
    ts = draw(st.integers(0, 2**41))
    count = draw(st.integers(1, 20))
    return [
        Record(
            base + i,
            ts + draw(st.integers(0, 10_000)),
            draw(keys),
            draw(keys),
            tuple(draw(headers)),
        )
        for i in range(count)
    ]


@settings(max_examples=40, deadline=None)
@given(record_lists(), st.sampled_from(CODECS), st.sampled_from([DefaultRecordBatch, AioBatch]))
def test_our_batches_decode_identically_in_kafka_python_and_aiokafka(records, codec, decoder):
    batch = build_batch(records, compression=codec, producer_id=7, producer_epoch=1)
    theirs = decoder(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records
    ]
    (header,) = iter_batches(batch)
    assert decode_records(batch, header) == records


@settings(max_examples=40, deadline=None)
@given(record_lists(), st.sampled_from(CODECS))
def test_kafka_python_batches_decode_identically_in_ours(records, codec):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**30,
    )
    for r in records:
        builder.append(r.offset - records[0].offset, r.timestamp, r.key, r.value, list(r.headers))
    batch = bytes(builder.build())
    batch = struct.pack(">q", records[0].offset) + batch[8:]  # the broker assigns the base offset
    (header,) = iter_batches(batch)
    # kafka-python stores a batch uncompressed when compression would not shrink it.
    assert header.compression in (codec, CompressionType.NONE)
    assert decode_records(batch, header) == records


def test_log_append_time_and_flags():
    records = [Record(5, 100, b"k", b"v"), Record(6, 90, None, None)]
    batch = build_batch(records, log_append_time=5000, transactional=True, producer_id=3)
    (header,) = iter_batches(batch)
    assert header.is_log_append_time
    assert header.is_transactional
    assert not header.is_control
    assert header.max_timestamp == 5000
    assert [r.timestamp for r in decode_records(batch, header)] == [5000, 5000]


def one_batch():
    return build_batch([Record(0, 1, b"k", b"value")])


def test_crc_mismatch_is_reported_with_position():
    size = len(one_batch())
    batch = bytearray(one_batch() * 2)
    batch[len(batch) - 1] ^= 0xFF  # the second batch's last byte
    with pytest.raises(CorruptBatchError, match=rf"seg\.log: position {size}: CRC-32C mismatch"):
        list(iter_batches(batch, source="seg.log"))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:30], "position 0: truncated batch header"),
        (lambda b: b[:-1], "passes the end"),
        (lambda b: b[:16] + b"\x01" + b[17:], "unsupported magic 1"),
        (lambda b: b[:8] + struct.pack(">i", 3) + b[12:], "below the 49-byte minimum"),
        (lambda b: b[:8] + struct.pack(">i", 2**31 - 1) + b[12:], "passes the end"),
    ],
)
def test_bad_batches_give_precise_errors(mutate, message):
    with pytest.raises(CorruptBatchError, match=message):
        list(iter_batches(mutate(one_batch()), source="x.log"))


def test_unknown_codec():
    batch = bytearray(one_batch())
    batch[22] |= 0x07  # codec 7
    batch[17:21] = struct.pack(">I", crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptBatchError, match="unknown compression codec 7"):
        list(iter_batches(batch))


def test_corrupt_compressed_payload():
    batch = bytearray(
        build_batch([Record(0, 1, b"k", b"v" * 100)], compression=CompressionType.LZ4)
    )
    batch[70] ^= 0xFF
    (header,) = iter_batches(batch, verify_crc=False)
    with pytest.raises(CorruptBatchError, match="lz4 data does not decompress"):
        decode_records(batch, header)


def decode_all(data):
    try:
        return [decode_records(data, h) for h in iter_batches(data, verify_crc=False)]
    except CorruptBatchError as exc:
        return exc


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_bytes_fail_precisely_or_decode(data):
    outcome = decode_all(data)
    if isinstance(outcome, CorruptBatchError):
        assert "position" in str(outcome)
    else:
        assert all(isinstance(r, Record) for batch in outcome for r in batch)


@pytest.mark.parametrize("commit", [True, False])
def test_control_batches_are_transaction_markers_to_kafka_python(commit):
    batch = build_control_batch(
        42, 1000, commit=commit, producer_id=9, producer_epoch=2, coordinator_epoch=5
    )
    (header,) = iter_batches(batch)
    assert header.is_control
    assert header.is_transactional
    (record,) = decode_records(batch, header)
    marker = parse_control_record(record)
    assert (marker.is_commit, marker.coordinator_epoch) == (commit, 5)
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.is_control_batch
    (their_record,) = list(theirs)
    assert their_record.commit is commit
    assert their_record.abort is not commit


def test_unknown_control_record_type():
    record = Record(3, 0, struct.pack(">hh", 0, 7), None)
    with pytest.raises(CorruptBatchError, match="unknown control record version 0 type 7"):
        parse_control_record(record)
