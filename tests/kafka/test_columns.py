"""The compiled columnar decoder agrees with the Python reference on everything.

Same buffers, same errors (type and message) on the shared broker segments,
every codec, offset bounds, headers, out-of-range values and hypothesis-mutated
batches; and the buffers hold what decode_records decodes.
"""

import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.batches import mutated_batches, sample_records
from support.leaks import growth_over

from remotelog.kafka import columns as columns_module
from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.columns import RecordColumns, decode_columns, decode_columns_python
from remotelog.kafka.consumer_records import consumer_batches
from remotelog.kafka.records import CorruptBatchError, Record, build_batch, iter_batches


def test_the_compiled_decoder_is_in_use():
    assert decode_columns is not decode_columns_python
    assert columns_module._fastrecords.decode_columns is not None


def both(data, headers, start=0, end=None, include_headers=True):
    """(compiled, reference): the columns of `headers`' batches, or the error."""

    def run(decode):
        try:
            return decode(data, headers, start, end, include_headers, "<src>")
        except CorruptBatchError as exc:
            return ("error", str(exc))

    return run(decode_columns), run(decode_columns_python)


def outcome(data, headers=None, **bounds):
    """The compiled outcome, once it is checked equal to the reference's."""
    headers = list(iter_batches(data, verify_crc=False)) if headers is None else headers
    compiled, reference = both(data, headers, **bounds)
    assert compiled == reference
    return compiled


def ints(buffer: bytes, code: str) -> list[int]:
    return [v for (v,) in struct.iter_unpack("=" + code, buffer)]


def binaries(column, count):
    """A binary column's values, None for nulls."""
    ends = ints(column.offsets, "i")
    valid = [
        column.validity is None or column.validity[i // 8] >> (i % 8) & 1 for i in range(count)
    ]
    return [column.data[ends[i] : ends[i + 1]] if valid[i] else None for i in range(count)]


@pytest.mark.parametrize("name", ["timeindex_test", "test_topic_a-0"])
def test_shared_segments_identical(kafka_logs, name):
    total = 0
    for path in sorted((kafka_logs / name).glob("*.log")):
        data = path.read_bytes()
        for include_headers in (True, False):
            found = outcome(data, consumer_batches(data), include_headers=include_headers)
            assert isinstance(found, RecordColumns)
        total += found.rows
    assert total == {"timeindex_test": 30_565, "test_topic_a-0": 10_995}[name]


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize("log_append_time", [None, 1_800_000_000_000])
def test_every_codec_identical_and_holding_the_records(codec, log_append_time):
    data = build_batch(sample_records(), compression=codec, log_append_time=log_append_time)
    data += build_batch(sample_records(base=2_000), compression=codec)
    found = outcome(data)
    expected = sample_records() + sample_records(base=2_000)
    n = len(expected)
    assert found.rows == n
    assert ints(found.offset, "q") == [r.offset for r in expected]
    stamps = [log_append_time or r.timestamp for r in expected[:4]]
    assert ints(found.timestamp, "q") == [
        t * 1000 for t in stamps + [r.timestamp for r in expected[4:]]
    ]
    assert ints(found.timestamp_type, "i") == [1 if log_append_time else 0] * 4 + [0] * 4
    assert binaries(found.key, n) == [r.key for r in expected]
    assert binaries(found.value, n) == [r.value for r in expected]
    headers = found.headers
    assert binaries(headers.keys, 8)[:4] == [b"h", b"h", "ü".encode(), b"traceparent"]
    assert binaries(headers.values, 8)[:4] == [b"x", None, b"", b"00-ab"]
    # A list of headers per record, null for a record without any.
    assert ints(headers.offsets, "i") == [0, 0, 3, 4, 4, 4, 7, 8, 8]
    assert headers.validity == bytes([0b01100110])


@pytest.mark.parametrize(
    ("start", "end", "offsets"),
    [
        (1_001, 1_007, [1_001, 1_002]),  # the end falls in a gap of the offsets
        (1_002, None, [1_002, 1_007, 2_000, 2_001, 2_002, 2_007]),
        (1_008, 2_002, [2_000, 2_001]),
        (0, 1_000, []),
    ],
)
def test_offset_bounds_cut_inside_batches(start, end, offsets):
    data = build_batch(sample_records()) + build_batch(sample_records(base=2_000))
    found = outcome(data, start=start, end=end)
    assert ints(found.offset, "q") == offsets
    assert len(found.headers.offsets) == 4 * (len(offsets) + 1)


def test_without_headers_and_without_batches():
    data = build_batch(sample_records())
    assert outcome(data, include_headers=False).headers is None
    empty = outcome(data, headers=[])
    assert empty.rows == 0
    assert empty.key.validity is None
    assert empty.key.offsets == struct.pack("=i", 0)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_varints_at_every_width_boundary_decode_alike(codec):
    # The decoder reads varints of one and two bytes in a fast path and parses
    # anything else again the general way: lengths, offset and timestamp deltas on
    # both sides of each width (zig-zag: 63/64 bytes, 8191/8192), a null key and
    # value, and a record with headers after them.
    sizes = [0, 63, 64, 8_191, 8_192, 20_000]
    records = [
        Record(delta, 1_700_000_000_000 + delta, b"k" * size, b"v" * size, ())
        for delta, size in zip([0, 63, 64, 8_191, 8_192, 1_000_000], sizes, strict=True)
    ]
    records += [
        Record(1_000_001, 1_699_999_990_000, None, None, ()),
        Record(1_000_002, 1_700_000_000_000, b"k", b"v", (("h", b"x"),)),
    ]
    found = outcome(build_batch(records, compression=codec))
    assert ints(found.offset, "q") == [r.offset for r in records]
    assert ints(found.timestamp, "q") == [r.timestamp * 1000 for r in records]
    assert binaries(found.key, len(records)) == [r.key for r in records]
    assert binaries(found.value, len(records)) == [r.value for r in records]
    assert ints(found.headers.offsets, "i") == [0] * 8 + [1]


def test_a_header_key_that_is_not_utf8_gets_replacement_characters():
    batch = build_batch([Record(0, 1, b"k", b"v", (("ab", b"1"),))])
    broken = batch.replace(b"ab", b"a\xff")
    found = outcome(broken)
    assert binaries(found.headers.keys, 1) == ["a\ufffd".encode()]


def with_base(batch: bytes, base_offset: int | None = None, base_timestamp: int | None = None):
    """The batch with its header's baseOffset or baseTimestamp replaced (CRC left stale)."""
    data = bytearray(batch)
    if base_offset is not None:
        data[0:8] = struct.pack(">q", base_offset)
    if base_timestamp is not None:
        data[27:35] = struct.pack(">q", base_timestamp)
    return bytes(data)


def test_values_beyond_64_bits_are_corrupt_batches_unless_outside_the_bounds():
    batch = build_batch([Record(0, 5, b"a", b"b", ()), Record(9, 5, b"a", b"b", ())])
    overflowing = with_base(batch, base_offset=2**63 - 3)
    assert outcome(overflowing) == (
        "error",
        "<src>: batch at position 0: record offset leaves 64 bits",
    )
    # The end offset stops the read before the record that leaves 64 bits.
    assert ints(outcome(overflowing, end=2**63 - 1).offset, "q") == [2**63 - 3]
    late = with_base(batch, base_timestamp=2**62)
    assert outcome(late) == (
        "error",
        "<src>: batch at position 0: record timestamp leaves 64 bits in microseconds",
    )


def test_bad_arguments_are_type_errors():
    data = build_batch(sample_records())
    (header,) = iter_batches(data)
    compiled = columns_module._fastrecords.decode_columns
    with pytest.raises(TypeError, match="BatchHeaders"):
        compiled(data, [tuple(header)], 0, None, True, "<src>")
    with pytest.raises(TypeError):
        compiled(data, (header,), 0, None, True, "<src>")  # a list, not a tuple


@settings(max_examples=400, deadline=None)
@given(mutated_batches(), st.integers(0, 1_010), st.one_of(st.none(), st.integers(0, 1_010)))
def test_mutated_batches_fail_or_decode_identically(data, start, end):
    try:
        headers = list(iter_batches(data, verify_crc=False))
    except CorruptBatchError:
        return  # a header the shallow iterator refuses: tests/kafka/test_fastrecords.py
    compiled, reference = both(data, headers, start, end)
    assert compiled == reference


def test_decoding_columns_leaks_no_memory():
    data = b"".join(build_batch(sample_records(base=i * 10)) for i in range(50))
    headers = list(iter_batches(data))

    def decode_everything():
        decode_columns(data, headers, 0, None, True, "<src>")
        with pytest.raises(CorruptBatchError, match="passes the end of the data"):
            decode_columns(data[:-5], headers, 0, None, True, "<src>")

    # 200 rounds of ~200 records: a leak would be megabytes
    assert growth_over(200, decode_everything) < 20_000


def test_byte_order_is_the_machines():
    found = outcome(build_batch([Record(1, 2, None, None, ())]))
    assert found.offset == (1).to_bytes(8, sys.byteorder)
