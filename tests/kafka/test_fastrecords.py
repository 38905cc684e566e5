"""The compiled batch iterator and decoder agree with the Python reference on everything.

Same headers, same records, same errors (type and message) on the shared
broker segments, on every codec, and on hypothesis-mutated batches.
"""

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.batches import mutated_batches, sample_records
from support.leaks import growth_over

from remotelog.kafka import records as records_module
from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.records import (
    CorruptBatchError,
    Record,
    build_batch,
    decode_records,
    decode_records_python,
    iter_batches,
    iter_batches_python,
)


def test_the_compiled_paths_are_built_and_in_use():
    # `make setup` builds with REMOTELOG_REQUIRE_EXTENSION=1: a missing compiler fails there.
    assert records_module.COMPILED
    assert type(iter_batches(b"")).__name__ == "BatchIterator"
    assert decode_records is not decode_records_python


def both(data, *, verify_crc=True, start=0):
    """(compiled, reference): headers and records of `data` through each, or the error."""

    def run(iterate, decode):
        out = []
        try:
            for header in iterate(data, "<src>", crc32c.crc32c if verify_crc else None, start):
                out.append((header, decode(data, header, source="<src>")))
        except CorruptBatchError as exc:
            out.append(("error", str(exc)))
        return out

    return (
        run(records_module._batch_iterator, decode_records),
        run(iter_batches_python, decode_records_python),
    )


def outcome(data, **options):
    """The compiled outcome, once it is checked equal to the reference's."""
    compiled, reference = both(data, **options)
    assert compiled == reference
    return compiled


@pytest.mark.parametrize("name", ["timeindex_test", "test_topic_a-0"])
def test_shared_segments_identical(kafka_logs, name):
    total = 0
    for path in sorted((kafka_logs / name).glob("*.log")):
        result = outcome(path.read_bytes())
        assert all(item[0] != "error" for item in result)
        total += sum(len(records) for _, records in result)
    assert total == {"timeindex_test": 30_565, "test_topic_a-0": 10_995}[name]


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize("log_append_time", [None, 1_800_000_000_000])
def test_every_codec_identical(codec, log_append_time):
    batch = build_batch(sample_records(), compression=codec, log_append_time=log_append_time)
    data = batch + build_batch(sample_records(base=2_000), compression=codec)
    result = outcome(data)
    decoded = result[0][1]
    expected_ts = (
        [log_append_time] * 4 if log_append_time else [r.timestamp for r in sample_records()]
    )
    assert [r.timestamp for r in decoded] == expected_ts
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [
        (r.offset, r.key, r.value, r.headers) for r in sample_records()
    ]
    assert result[1][1][0].offset == 2_000


def test_start_position_and_crc_off():
    first = build_batch(sample_records())
    data = first + build_batch(sample_records(base=5_000))
    result = outcome(data, start=len(first), verify_crc=False)
    assert [h.base_offset for h, _ in result] == [5_000]
    assert result[0][0].position == len(first)


def test_mismatched_crc_and_truncation_messages():
    batch = bytearray(build_batch(sample_records()))
    batch[-1] ^= 0x01
    (error,) = outcome(bytes(batch))
    assert error[0] == "error"
    assert error[1].startswith("<src>: position 0: CRC-32C mismatch (stored 0x")
    truncated = outcome(bytes(batch[:40]), verify_crc=False)
    assert truncated == [("error", "<src>: position 0: truncated batch header (40 of 61 bytes)")]


def test_header_names_and_default_source():
    batch = build_batch([Record(0, 1, b"k", b"v", (("é-key", b"1"),))])
    (header,) = iter_batches(batch)
    (record,) = decode_records(batch, header)
    assert record.headers == (("é-key", b"1"),)
    assert isinstance(record, Record)
    assert record._asdict()["value"] == b"v"
    broken = bytearray(batch)
    broken[-9] = 0x01  # the header key's length byte: zig-zag -1, a null key
    (header,) = iter_batches(bytes(broken), verify_crc=False)
    with pytest.raises(CorruptBatchError, match=r"^<bytes>: batch at position 0: null header key$"):
        decode_records(bytes(broken), header)


def test_bad_arguments_are_type_errors():
    batch = build_batch(sample_records())
    (header,) = iter_batches(batch)
    with pytest.raises(TypeError, match="unexpected keyword"):
        decode_records(batch, header, sauce="x")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="BatchHeader"):
        decode_records(batch, tuple(header))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="source must be a str"):
        decode_records(batch, header, source=b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start must not be negative"):
        iter_batches(batch, start=-1)


def test_decoding_leaks_no_memory():
    data = b"".join(build_batch(sample_records(base=i * 10)) for i in range(50))
    headers = list(iter_batches(data))

    def decode_everything():
        for header in iter_batches(data):
            decode_records(data, header)
        with pytest.raises(CorruptBatchError, match="passes the end of the data"):
            decode_records(data[:-5], headers[-1])

    # 200 rounds of ~200 records: a leak would be megabytes
    assert growth_over(200, decode_everything) < 20_000


@settings(max_examples=400, deadline=None)
@given(mutated_batches(), st.booleans())
def test_mutated_batches_fail_or_decode_identically(data, verify_crc):
    compiled, reference = both(data, verify_crc=verify_crc)
    assert compiled == reference


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_identical(data):
    compiled, reference = both(data, verify_crc=False)
    assert compiled == reference
