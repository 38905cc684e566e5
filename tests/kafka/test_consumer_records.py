"""Batches as a consumer hands them out: bounds, timestamp types, epochs, transactions."""

import pytest

from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.consumer_records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    AbortedTransactions,
    fetched_records,
)
from remotelog.kafka.records import Record, build_batch, build_control_batch


def records(first: int, count: int) -> list[Record]:
    return [
        Record(o, 1_000 + o, f"k{o}".encode(), b"v", (("h", b"x"),))
        for o in range(first, first + count)
    ]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_bounds_cut_inside_batches_of_every_codec(codec):
    data = build_batch(records(0, 5), compression=codec) + build_batch(
        records(5, 5), compression=codec
    )
    found = list(fetched_records(data, "t", 3, start_offset=2, end_offset=8).records())
    assert [r.offset for r in found] == [2, 3, 4, 5, 6, 7]
    assert found[0].key == b"k2"
    assert found[0].headers == (("h", b"x"),)
    assert {(r.topic, r.partition, r.timestamp_type) for r in found} == {("t", 3, CREATE_TIME)}
    assert [r.timestamp for r in found] == [1_002, 1_003, 1_004, 1_005, 1_006, 1_007]


def test_log_append_time_and_leader_epochs_as_the_broker_set_them():
    data = build_batch(records(0, 2), log_append_time=9_999, partition_leader_epoch=4)
    data += build_batch(records(2, 1), partition_leader_epoch=-1)
    found = list(fetched_records(data, "t", 0).records())
    assert [(r.timestamp, r.timestamp_type, r.leader_epoch) for r in found] == [
        (9_999, LOG_APPEND_TIME, 4),
        (9_999, LOG_APPEND_TIME, 4),
        (1_002, CREATE_TIME, None),
    ]


def txn(first: int, count: int, pid: int) -> bytes:
    return build_batch(records(first, count), producer_id=pid, producer_epoch=0, transactional=True)


def marker(offset: int, pid: int, *, commit: bool) -> bytes:
    return build_control_batch(offset, 0, commit=commit, producer_id=pid, producer_epoch=0)


def test_read_committed_skips_aborted_transactions_until_their_marker():
    # Producer 1 aborts 0-1 and, in a later transaction of the same id, commits 6.
    # Producer 2's transaction 2-3 commits; a plain batch at 5.
    data = (
        txn(0, 2, 1)
        + txn(2, 2, 2)
        + marker(4, 1, commit=False)
        + build_batch(records(5, 1))
        + txn(6, 1, 1)
        + marker(7, 2, commit=True)
        + marker(8, 1, commit=True)
    )
    everything = [r.offset for r in fetched_records(data, "t", 0).records()]
    assert everything == [0, 1, 2, 3, 5, 6]  # markers are never records
    committed = fetched_records(data, "t", 0, aborted=AbortedTransactions([(1, 0)])).records()
    assert [r.offset for r in committed] == [2, 3, 5, 6]
    # An aborted transaction that began before the fetched range still hides its batches.
    tail = txn(6, 1, 1) + marker(7, 1, commit=False)
    later = fetched_records(tail, "t", 0, aborted=AbortedTransactions([(1, 3)])).records()
    assert list(later) == []
