"""The partition log writes directories a Kafka reader (ours and kafka-python) can read."""

import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatch

from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.kafka.indexes import OffsetIndex, TimeIndex, parse_transaction_index
from remotelog.kafka.records import decode_records, iter_batches
from remotelog.kafka.state_files import (
    parse_leader_epoch_checkpoint,
    parse_producer_snapshot,
    read_hw_checkpoint,
)

TOPIC_ID = uuid.UUID(int=0xABCDEF)


class Clock:
    def __init__(self):
        self.now = 1_700_000_000.0

    def __call__(self):
        return self.now


def make_log(tmp_path, clock=None, **config):
    defaults = {"segment_bytes": 8192, "index_interval_bytes": 512}
    return PartitionLog.create(
        tmp_path, "orders", 0, TOPIC_ID, LogConfig(**{**defaults, **config}), clock or Clock()
    )


def fill(log, count, epoch=0, **kwargs):
    for i in range(count):
        log.append([(f"k{i}".encode(), b"v" * 100)], leader_epoch=epoch, **kwargs)


def all_records(directory):
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for header in iter_batches(data, source=str(path)):
            out.extend(decode_records(data, header))
    return out


def test_append_rolls_on_segment_bytes_with_kafka_names(tmp_path):
    log = make_log(tmp_path)
    fill(log, 200)
    directory = tmp_path / "orders-0"
    logs = sorted(directory.glob("*.log"))
    assert len(logs) > 2
    assert all(len(p.stem) == 20 for p in logs)
    for path in logs[:-1]:
        assert path.stat().st_size <= 8192
        # A producer snapshot named by the next segment's base offset is taken at each roll.
    bases = [int(p.stem) for p in logs]
    assert sorted(int(p.stem) for p in directory.glob("*.snapshot")) == bases[1:]
    records = all_records(directory)
    assert [r.offset for r in records] == list(range(200))
    assert log.log_end_offset == 200
    assert (directory / "partition.metadata").read_text().startswith("version: 0\ntopic_id: ")
    assert log.topic_id == TOPIC_ID


def test_kafka_python_reads_every_batch(tmp_path):
    log = make_log(tmp_path)
    fill(log, 50)
    data = (tmp_path / "orders-0" / "00000000000000000000.log").read_bytes()
    for header in iter_batches(data):
        theirs = DefaultRecordBatch(
            bytearray(data[header.position : header.position + header.size])
        )
        assert theirs.validate_crc()
        assert [r.offset for r in theirs] == [header.base_offset]


@pytest.mark.parametrize("entry_bytes", [8, 12])
def test_index_entries_follow_index_interval_bytes_and_point_at_batch_ends(tmp_path, entry_bytes):
    """12: as a Kafka after KIP-1333 (metadata version 4.4-IV1) writes them."""
    log = make_log(
        tmp_path,
        segment_bytes=100_000,
        index_interval_bytes=1000,
        offset_index_entry_bytes=entry_bytes,
    )
    fill(log, 100)
    directory = tmp_path / "orders-0"
    data = (directory / "00000000000000000000.log").read_bytes()
    raw = (directory / "00000000000000000000.index").read_bytes()
    index = OffsetIndex.parse(raw, 0, log_size=len(data))
    assert index.entry.size == entry_bytes
    assert len(raw) == len(index.entries) * entry_bytes
    time_index = TimeIndex.parse((directory / "00000000000000000000.timeindex").read_bytes(), 0)
    batches = {h.position: h for h in iter_batches(data)}
    # Kafka's rule: before appending a batch, index it if more than
    # index.interval.bytes were appended since the last entry.
    expected, since = [], 0
    for header in batches.values():
        if since > 1000:
            expected.append(header.last_offset)
            since = 0
        since += header.size
    assert [e.offset for e in index.entries] == expected
    assert len(expected) > 5
    for entry in index.entries:
        assert batches[entry.position].last_offset == entry.offset
    assert time_index.entries  # constant clock: one entry for the one max timestamp
    assert index.lookup(57).position <= next(p for p, h in batches.items() if h.base_offset == 57)


def test_an_offset_index_entry_is_8_or_12_bytes():
    with pytest.raises(ValueError, match="offset_index_entry_bytes 10: 8 or 12"):
        LogConfig(offset_index_entry_bytes=10)


def test_leader_epochs_are_checkpointed(tmp_path):
    log = make_log(tmp_path)
    fill(log, 5, epoch=0)
    fill(log, 5, epoch=3)
    fill(log, 2, epoch=3)
    text = (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text()
    assert parse_leader_epoch_checkpoint(text) == [(0, 0), (3, 5)]
    assert all_records(tmp_path / "orders-0")[7].offset == 7


def test_reopen_restores_state(tmp_path):
    log = make_log(tmp_path)
    fill(log, 120, epoch=2)
    again = PartitionLog.open(tmp_path / "orders-0", log.config)
    assert again.log_end_offset == 120
    assert [s.base_offset for s in again.segments] == [s.base_offset for s in log.segments]
    assert again.leader_epochs == [(2, 0)]
    again.append([(b"k", b"after reopen")], leader_epoch=2)
    assert all_records(tmp_path / "orders-0")[-1].value == b"after reopen"


def test_torn_last_batch_is_truncated_and_nothing_before_is_lost(tmp_path):
    log = make_log(tmp_path, segment_bytes=1_000_000)
    fill(log, 30)
    path = tmp_path / "orders-0" / "00000000000000000000.log"
    intact = path.read_bytes()
    path.write_bytes(intact[:-20])  # the broker died mid-write
    recovered = PartitionLog.open(tmp_path / "orders-0", log.config)
    assert recovered.log_end_offset == 29
    assert [r.offset for r in all_records(tmp_path / "orders-0")] == list(range(29))
    recovered.append([(b"k", b"new")], leader_epoch=0)
    assert [r.offset for r in all_records(tmp_path / "orders-0")] == list(range(30))


def test_roll_on_segment_ms(tmp_path):
    clock = Clock()
    log = make_log(tmp_path, clock=clock, segment_bytes=1_000_000, segment_ms=60_000)
    fill(log, 3)
    clock.now += 61
    fill(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 3]


def test_read_returns_whole_batches_from_the_one_holding_the_offset(tmp_path):
    log = make_log(tmp_path)
    fill(log, 100)
    data = log.read(42, 1000)
    headers = list(iter_batches(data))
    assert headers[0].base_offset == 42
    assert sum(h.size for h in headers) <= 1000
    assert len(log.read(99, 1)) > 1  # at least one batch
    with pytest.raises(ValueError, match="outside"):
        log.read(100, 1000)


def test_delete_segments_below_keeps_the_active_segment(tmp_path):
    log = make_log(tmp_path)
    fill(log, 200)
    bases = [s.base_offset for s in log.segments]
    deleted = log.delete_segments_below(bases[2])
    assert deleted == bases[:2]
    assert log.log_start_offset == bases[2]
    assert not (tmp_path / "orders-0" / f"{bases[0]:020d}.log").exists()
    assert log.delete_segments_below(10_000) == bases[2:-1]
    assert [s.base_offset for s in log.segments] == bases[-1:]


def test_transactions_hold_back_the_last_stable_offset(tmp_path):
    log = make_log(tmp_path, segment_bytes=1_000_000)
    fill(log, 3)
    first = log.append(
        [(b"t", b"1")], leader_epoch=0, producer_id=7, producer_epoch=0, transactional=True
    )
    fill(log, 2)
    assert log.last_stable_offset == first.base_offset
    marker = log.append_marker(commit=False, producer_id=7, producer_epoch=0, leader_epoch=0)
    assert log.last_stable_offset == log.log_end_offset == marker.last_offset + 1
    aborted = parse_transaction_index(
        (tmp_path / "orders-0" / "00000000000000000000.txnindex").read_bytes()
    )
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [
        (7, first.base_offset, marker.last_offset)
    ]
    log.roll()
    (entry,) = parse_producer_snapshot(
        (tmp_path / "orders-0" / f"{log.log_end_offset:020d}.snapshot").read_bytes()
    )
    assert (entry.producer_id, entry.current_txn_first_offset) == (7, -1)


def test_high_watermark_is_kafkas_checkpoint_file(tmp_path):
    log = make_log(tmp_path)
    fill(log, 10)
    log.set_high_watermark(6)
    assert log.high_watermark == 6
    assert log.last_stable_offset == 6
    assert read_hw_checkpoint(tmp_path / "replication-offset-checkpoint") == {("orders", 0): 6}
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\norders 0 6\n"
    # Another process reading the directory sees the same high watermark and LSO.
    reader = PartitionLog.open(tmp_path / "orders-0", log.config)
    assert (reader.high_watermark, reader.last_stable_offset, reader.log_end_offset) == (6, 6, 10)


def test_a_reader_of_the_directory_sees_an_open_transaction(tmp_path):
    log = make_log(tmp_path, segment_bytes=1_000_000)
    fill(log, 2)
    log.append([(b"t", b"1")], leader_epoch=0, producer_id=3, producer_epoch=0, transactional=True)
    fill(log, 2)
    reader = PartitionLog.open(tmp_path / "orders-0", log.config)
    assert reader.last_stable_offset == 2
    assert reader.log_end_offset == 5


def test_reopen_replays_only_from_the_latest_producer_snapshot(tmp_path):
    log = make_log(tmp_path)
    log.append([(b"t", b"1")], leader_epoch=0, producer_id=4, producer_epoch=0, transactional=True)
    fill(log, 150)  # rolls several times while the transaction stays open
    first_segment = tmp_path / "orders-0" / "00000000000000000000.log"
    assert len(log.segments) > 2
    # Opening must not re-read rolled segments below the snapshot: damage one and reopen.
    first_segment.write_bytes(b"\x00" * first_segment.stat().st_size)
    reader = PartitionLog.open(tmp_path / "orders-0", log.config)
    assert reader.log_end_offset == 151
    assert [s.base_offset for s in reader.segments] == [s.base_offset for s in log.segments]
    # The open transaction survives through the snapshot: the LSO is still held back.
    assert reader.last_stable_offset == 0
    batches = list(iter_batches(reader.read(100, 1)))
    assert batches[0].base_offset == 100


def test_corrupt_snapshot_falls_back_to_a_full_replay(tmp_path):
    log = make_log(tmp_path)
    log.append([(b"t", b"1")], leader_epoch=0, producer_id=4, producer_epoch=0, transactional=True)
    fill(log, 150)
    for snapshot in (tmp_path / "orders-0").glob("*.snapshot"):
        snapshot.write_bytes(b"\x00\x01garbage")
    reader = PartitionLog.open(tmp_path / "orders-0", log.config)
    assert reader.last_stable_offset == 0
    assert reader.log_end_offset == 151


def test_missing_index_of_a_rolled_segment_is_rebuilt(tmp_path):
    log = make_log(tmp_path)
    fill(log, 150)
    index_path = tmp_path / "orders-0" / "00000000000000000000.index"
    original = index_path.read_bytes()
    index_path.unlink()
    reader = PartitionLog.open(tmp_path / "orders-0", log.config)
    assert index_path.read_bytes() == original
    assert reader.log_end_offset == 150
    assert next(iter_batches(reader.read(3, 1))).base_offset == 3
