"""KIP-1333's offset index: 12-byte entries (relative offset i32, position i64) beside
Kafka's 8-byte ones, each told from the other by the file's size, built from the bytes
of broker-written indexes."""

import pytest
from support.wide_indexes import KAFKA_ENTRY, KIP_1333_ENTRY, widened

from remotelog.kafka.indexes import (
    OFFSET_ENTRY,
    WIDE_OFFSET_ENTRY,
    CorruptIndexError,
    OffsetIndex,
    OffsetPosition,
    lookup_offset_in,
    offset_entry_of,
    position_after_in,
)

NAME = "timeindex_test"  # the shared logs whose segments have index entries


def broker_indexes(kafka_logs):
    for log in sorted((kafka_logs / NAME).glob("*.log")):
        yield int(log.stem), log.stat().st_size, log.with_suffix(".index").read_bytes()


def test_a_widened_broker_index_reads_as_the_same_entries(kafka_logs):
    checked = 0
    for base, log_size, narrow in broker_indexes(kafka_logs):
        wide = widened(narrow)
        assert len(wide) == len(narrow) // 8 * 12
        as_kafka = OffsetIndex.parse(narrow, base, log_size=log_size)
        as_kip = OffsetIndex.parse(wide, base, log_size=log_size)
        assert (as_kafka.entry, as_kip.entry) == (OFFSET_ENTRY, WIDE_OFFSET_ENTRY)
        assert as_kip.entries == as_kafka.entries
        assert as_kip.to_bytes() == wide  # rewritten in the format it was read in
        assert as_kafka.to_bytes(WIDE_OFFSET_ENTRY) == wide
        checked += len(as_kip.entries)
    assert checked > 500


def test_lookups_on_wide_buffers_agree_with_the_narrow_ones(kafka_logs):
    for base, log_size, narrow in broker_indexes(kafka_logs):
        wide = widened(narrow)
        entries = OffsetIndex.parse(narrow, base).entries
        targets = [base, base + 1, *(e.offset for e in entries), entries[-1].offset + 10]
        for target in targets:
            assert lookup_offset_in(wide, base, target, WIDE_OFFSET_ENTRY) == lookup_offset_in(
                narrow, base, target
            )
            assert position_after_in(
                wide, base, target, log_size, WIDE_OFFSET_ENTRY
            ) == position_after_in(narrow, base, target, log_size)


def test_positions_past_4_gib_are_kept_whole():
    entries = [(1, 4096), (7, 2**31 + 5), (9, 5 * 2**30)]
    raw = b"".join(KIP_1333_ENTRY.pack(*e) for e in entries)  # 36 bytes: 12 alone divides
    index = OffsetIndex.parse(raw, 1000, log_size=6 * 2**30)
    assert index.entries == [OffsetPosition(1000 + r, p) for r, p in entries]
    assert index.lookup(1008) == OffsetPosition(1007, 2**31 + 5)
    assert lookup_offset_in(raw, 1000, 2000, WIDE_OFFSET_ENTRY).position == 5 * 2**30


@pytest.mark.parametrize("count", [3, 6, 9])
def test_sizes_both_formats_divide_are_told_apart_by_what_reads_as_an_index(count):
    """3 narrow entries and 2 wide ones are both 24 bytes: read the wrong way, the
    positions go backwards or past the log."""
    pairs = [(10 * (n + 1), 4096 * (n + 1)) for n in range(count)]
    log_size = 4096 * (count + 1)
    narrow = b"".join(KAFKA_ENTRY.pack(*p) for p in pairs)
    assert offset_entry_of(narrow, log_size) is OFFSET_ENTRY
    assert offset_entry_of(narrow) is OFFSET_ENTRY
    wide_pairs = pairs[: count * 8 // 12]
    wide = b"".join(KIP_1333_ENTRY.pack(*p) for p in wide_pairs)
    assert len(wide) == len(narrow)
    assert offset_entry_of(wide, log_size) is WIDE_OFFSET_ENTRY
    parsed = OffsetIndex.parse(wide, 0, log_size=log_size)
    assert [(e.offset, e.position) for e in parsed.entries] == wide_pairs


def test_a_wide_index_with_a_preallocated_tail_ends_at_it():
    raw = KIP_1333_ENTRY.pack(3, 100) + KIP_1333_ENTRY.pack(8, 900) + bytes(12 * 5)
    assert offset_entry_of(raw, 1000) is WIDE_OFFSET_ENTRY
    assert OffsetIndex.parse(raw, 0, log_size=1000).entries == [
        OffsetPosition(3, 100),
        OffsetPosition(8, 900),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (bytes(10), "size 10 is not a multiple of the 8- or 12-byte entry"),
        (KIP_1333_ENTRY.pack(5, 10) + KIP_1333_ENTRY.pack(3, 20) + bytes(12), "entry 1"),
    ],
)
def test_a_corrupt_wide_index_names_the_problem(data, message):
    with pytest.raises(CorruptIndexError, match=message):
        OffsetIndex.parse(data, 0, "seg.index")
