"""Indexes and state files of the shared broker-written partitions, read and rewritten exactly."""

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remotelog.cli.main import main
from remotelog.kafka.indexes import (
    AbortedTxn,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    parse_transaction_index,
    position_after_in,
    transaction_index_bytes,
)
from remotelog.kafka.records import iter_batches
from remotelog.kafka.state_files import (
    CorruptStateFileError,
    ProducerStateEntry,
    leader_epoch_checkpoint_text,
    parse_leader_epoch_checkpoint,
    parse_partition_metadata,
    parse_producer_snapshot,
    partition_metadata_text,
    producer_snapshot_bytes,
)

DIRS = ["timeindex_test", "test_topic_a-0"]


def segments(kafka_logs, name):
    for log in sorted((kafka_logs / name).glob("*.log")):
        base = int(log.stem)
        data = log.read_bytes()
        index = OffsetIndex.parse(log.with_suffix(".index").read_bytes(), base, str(log))
        time_index = TimeIndex.parse(log.with_suffix(".timeindex").read_bytes(), base, str(log))
        yield base, data, list(iter_batches(data)), index, time_index


@pytest.mark.parametrize("name", DIRS)
def test_offset_index_entries_point_at_the_batch_ending_at_their_offset(kafka_logs, name):
    checked = 0
    for _, data, batches, index, _ in segments(kafka_logs, name):
        by_position = {b.position: b for b in batches}
        index.check_against_segment_end(len(data), "seg")
        for entry in index.entries:
            assert by_position[entry.position].last_offset == entry.offset
            checked += 1
    assert checked > 0  # a segment smaller than index.interval.bytes may have none


@pytest.mark.parametrize("name", DIRS)
def test_offset_index_lookup_agrees_with_a_linear_scan(kafka_logs, name):
    rng = random.Random(1)
    for base, _, batches, index, _ in segments(kafka_logs, name):
        last = batches[-1].last_offset
        for target in [base, last, *rng.sample(range(base, last + 1), 200)]:
            hint = index.lookup(target)
            # Linear: the batch holding the target, scanned from the segment start.
            holding = next(b for b in batches if b.base_offset <= target <= b.last_offset)
            # The hint never overshoots, and scanning from it reaches the same batch.
            assert hint.position <= holding.position
            from_hint = next(
                b for b in batches if b.position >= hint.position and b.last_offset >= target
            )
            assert from_hint == holding


@pytest.mark.parametrize("name", DIRS)
def test_position_after_ends_at_a_batch_boundary_past_the_batch_holding_the_offset(
    kafka_logs, name
):
    """What a reader by URL reads up to: never short of the offset's batch, and one
    index entry past it at most."""
    for base, data, batches, index, _ in segments(kafka_logs, name):
        raw = index.to_bytes()
        boundaries = {b.position for b in batches} | {len(data)}
        for holding in batches:
            for offset in {holding.base_offset, holding.last_offset}:
                after = position_after_in(raw, base, offset, len(data))
                assert after in boundaries
                assert after >= holding.position + holding.size
                # At most two entries on: the first at or past the offset, and the next.
                later = [e for e in index.entries if e.offset >= offset][1:2]
                assert after == (later[0].position if later else len(data))


@pytest.mark.parametrize("name", DIRS)
def test_time_index_is_a_hint_within_the_segment(kafka_logs, name):
    for base, _, batches, _, time_index in segments(kafka_logs, name):
        if not time_index.entries:
            continue
        last = batches[-1].last_offset
        for entry in time_index.entries:
            assert base <= entry.offset <= last
            # Kafka records (max timestamp so far, its offset): the entry's timestamp is the
            # largest batch max timestamp up to the batch holding its offset.
            so_far = [b.max_timestamp for b in batches if b.base_offset <= entry.offset]
            assert entry.timestamp == max(so_far)
        first = time_index.entries[0]
        assert time_index.lookup(first.timestamp - 1).offset == base
        assert time_index.lookup(first.timestamp) == first


@pytest.mark.parametrize("name", DIRS)
def test_indexes_rewrite_byte_exactly(kafka_logs, name):
    for log in sorted((kafka_logs / name).glob("*.log")):
        base = int(log.stem)
        raw = log.with_suffix(".index").read_bytes()
        assert OffsetIndex.parse(raw, base).to_bytes() == raw
        raw = log.with_suffix(".timeindex").read_bytes()
        assert TimeIndex.parse(raw, base).to_bytes() == raw


def test_preallocated_zero_tail_is_not_entries():
    index = OffsetIndex(100)
    index.append(110, 0)
    index.append(120, 4096)
    parsed = OffsetIndex.parse(OffsetIndex(100, index.entries).to_bytes() + bytes(80), 100)
    assert parsed.entries == index.entries
    assert parsed.lookup(99).position == 0
    assert parsed.lookup(119).offset == 110
    assert parsed.lookup(10_000).offset == 120


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (bytes(7), "size 7 is not a multiple of the 8- or 12-byte entry"),
        (bytes.fromhex("00000005 00000000 00000003 00000010"), "entry 1: relative offset 3"),
        (bytes.fromhex("ffffffff 00000000"), "entry 0: relative offset -1"),
    ],
)
def test_corrupt_offset_index(data, message):
    with pytest.raises(CorruptIndexError, match=message):
        OffsetIndex.parse(data, 0, "seg.index")


def test_index_entry_past_the_log_end():
    index = OffsetIndex(0)
    index.append(5, 5000)
    with pytest.raises(CorruptIndexError, match="entry 0 points at position 5000"):
        index.check_against_segment_end(4096, "seg.index")


def test_transaction_index_round_trip_and_errors():
    entries = [AbortedTxn(7, 100, 150, 90), AbortedTxn(8, 120, 130, 100)]
    raw = transaction_index_bytes(entries)
    assert len(raw) == 68
    assert parse_transaction_index(raw) == entries
    with pytest.raises(CorruptIndexError, match="not a multiple of the 34-byte entry"):
        parse_transaction_index(raw[:-1])
    with pytest.raises(CorruptIndexError, match="entry 0: unknown version 1"):
        parse_transaction_index(b"\x00\x01" + raw[2:34])


def test_real_producer_snapshots(kafka_logs):
    path = kafka_logs / "timeindex_test" / "00000000000000007729.snapshot"
    raw = path.read_bytes()
    (entry,) = parse_producer_snapshot(raw, str(path))
    # The idempotent producer (pid 0) wrote offsets 0..7728 with sequence == offset.
    assert (entry.producer_id, entry.last_sequence, entry.last_offset) == (0, 7728, 7728)
    assert producer_snapshot_bytes([entry]) == raw
    for small in (kafka_logs / "test_topic_a-0").glob("*.snapshot"):
        assert parse_producer_snapshot(small.read_bytes()) == []


def test_producer_snapshot_errors():
    raw = bytearray(producer_snapshot_bytes([ProducerStateEntry(1, 0, 5, 5, 0, 9, -1, -1)]))
    raw[-1] ^= 1
    with pytest.raises(CorruptStateFileError, match="CRC-32C mismatch"):
        parse_producer_snapshot(bytes(raw))
    with pytest.raises(CorruptStateFileError, match="unsupported snapshot version 2"):
        parse_producer_snapshot(b"\x00\x02" + bytes(raw[2:]))
    with pytest.raises(CorruptStateFileError, match="shorter than the header"):
        parse_producer_snapshot(b"\x00\x01")


def test_leader_epoch_checkpoint(kafka_logs):
    text = (kafka_logs / "timeindex_test" / "leader-epoch-checkpoint").read_text()
    assert parse_leader_epoch_checkpoint(text) == [(0, 0)]
    assert leader_epoch_checkpoint_text([(0, 0)]) == text
    assert parse_leader_epoch_checkpoint("0\n2\n0 0\n3 150\n") == [(0, 0), (3, 150)]
    with pytest.raises(CorruptStateFileError, match="count 2 does not match 1"):
        parse_leader_epoch_checkpoint("0\n2\n0 0\n")
    with pytest.raises(CorruptStateFileError, match="expected version 0"):
        parse_leader_epoch_checkpoint("1\n0\n")
    with pytest.raises(CorruptStateFileError, match="expected version 0"):
        parse_leader_epoch_checkpoint("1\n")
    # As Kafka's CheckpointFile reads them: the empty file a new follower's partition
    # starts with, and one holding only its version, have no entries.
    assert parse_leader_epoch_checkpoint("") == []
    assert parse_leader_epoch_checkpoint("0\n") == []


def test_partition_metadata(kafka_logs):
    text = (kafka_logs / "timeindex_test" / "partition.metadata").read_text()
    topic_id = parse_partition_metadata(text)
    assert topic_id == uuid.UUID("a79f4f37-8aa4-47cc-b5ef-a9e1b830cf3c")
    assert partition_metadata_text(topic_id) == text
    with pytest.raises(CorruptStateFileError, match="is not a Kafka Uuid"):
        parse_partition_metadata("version: 0\ntopic_id: nope\n")


def test_dump_log_cli_on_real_partition(kafka_logs, capsys):
    assert main(["dump-log", str(kafka_logs / "timeindex_test"), "--verify-index"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("baseOffset: ") for line in out) == 30_565
    assert all(line.endswith("isvalid: true") for line in out if line.startswith("baseOffset"))
    assert out[-1] == "Summary: 4 segment(s), 30565 batches, 30565 records, all CRCs valid"
    assert "Offset index 00000000000000022964.index: 253 entries, 0 mismatches" in out


def test_dump_log_cli_prints_data_and_reports_corruption(kafka_logs, tmp_path, capsys):
    source = kafka_logs / "test_topic_a-0" / "00000000000000000000.log"
    assert main(["dump-log", str(source), "--print-data"]) == 0
    out = capsys.readouterr().out
    assert "| offset: 0 timestamp: 1700691401835 headerKeys: [header1,header2] key: 0" in out
    corrupt = bytearray(source.read_bytes())
    corrupt[100] ^= 0xFF
    broken = tmp_path / "00000000000000000000.log"
    broken.write_bytes(bytes(corrupt))
    assert main(["dump-log", str(broken)]) == 1
    out = capsys.readouterr().out
    assert f"Corrupt: {broken}: position 0: CRC-32C mismatch" in out
    assert out.splitlines()[-1].endswith("1 problem(s)")
    assert main(["dump-log", str(tmp_path / "missing.log")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def parse_or_error(parse, data):
    try:
        return parse(data)
    except (CorruptIndexError, CorruptStateFileError) as exc:
        return exc


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_index_and_state_bytes_fail_precisely(data):
    parsers = [
        lambda d: OffsetIndex.parse(d, 0, "x.index").entries,
        lambda d: TimeIndex.parse(d, 0, "x.timeindex").entries,
        lambda d: parse_transaction_index(d, "x.txnindex"),
        lambda d: parse_producer_snapshot(d, "x.snapshot"),
        lambda d: parse_leader_epoch_checkpoint(d.decode("latin-1"), "checkpoint"),
    ]
    for parse in parsers:
        outcome = parse_or_error(parse, data)
        if isinstance(outcome, Exception):
            assert str(outcome).startswith(("x.", "checkpoint"))
        else:
            assert isinstance(outcome, list)
