"""Leader-epoch arithmetic of RemoteLogManager, checked against Kafka's rules and examples."""

import pytest

from remotelog.core.epochs import (
    end_offset_for,
    entries_in_range,
    epoch_for_offset,
    filtered,
    within_lineage,
)

LINEAGE = [(0, 0), (1, 10), (2, 20), (3, 30), (4, 40), (5, 50), (7, 70)]
LOG_END = 90


def test_entries_in_range_truncates_both_ends_like_leader_epoch_file_cache():
    lineage = [(0, 0), (1, 10), (3, 30)]
    assert entries_in_range(lineage, 15, 35) == [(1, 15), (3, 30)]
    assert entries_in_range(lineage, 30, 40) == [(3, 30)]
    assert entries_in_range(lineage, 0, 10) == [(0, 0)]
    # -1: the head is kept, as for the checkpoint shipped with a segment.
    assert entries_in_range(lineage, -1, 30) == [(0, 0), (1, 10)]
    assert entries_in_range(lineage, 5, 5) == [(0, 5)]


def test_epoch_lookups():
    assert epoch_for_offset(LINEAGE, 0) == 0
    assert epoch_for_offset(LINEAGE, 69) == 5
    assert epoch_for_offset(LINEAGE, 1000) == 7
    assert epoch_for_offset([(3, 30)], 10) is None
    assert end_offset_for(LINEAGE, 5, LOG_END) == 70
    assert end_offset_for(LINEAGE, 7, LOG_END) == LOG_END
    with pytest.raises(ValueError, match="not in the lineage"):
        end_offset_for(LINEAGE, 6, LOG_END)


def test_filtered_drops_epochs_without_records():
    lineage = [(0, 0), (1, 10), (2, 20), (5, 60), (6, 60), (7, 70)]
    assert filtered(lineage) == [(0, 0), (1, 10), (2, 20), (6, 60), (7, 70)]


@pytest.mark.parametrize(
    ("segment_epochs", "end_offset", "expected"),
    [
        ([(1, 15), (2, 20), (3, 30), (4, 40), (5, 50)], 69, True),
        ([(1, 15), (2, 20), (3, 30), (4, 40), (5, 50)], 70, False),  # runs into epoch 7
        ([(0, 0), (1, 10)], 15, True),
        ([(1, 5), (2, 20)], 25, False),  # epoch 1 cannot start before the lineage's 10
        ([(1, 15), (2, 21)], 25, False),  # epoch 2 starts elsewhere than in the lineage
        ([(6, 60)], 65, False),  # epoch 6 is not in the lineage
        ([(7, 70)], 95, False),  # beyond the log end offset
        ([(8, 95)], 99, False),  # newer than the lineage
        ([(7, 70)], 80, True),
    ],
)
def test_within_lineage(segment_epochs, end_offset, expected):
    assert within_lineage(segment_epochs, end_offset, LOG_END, LINEAGE) is expected


def test_within_lineage_accepts_an_overlapping_segment_after_the_log_start_moved():
    # Kafka's example: after segment1 (5-50) is deleted, the lineage is {7: 51, 9: 100};
    # segment2 (14-150, epochs {5: 14, 7: 15, 9: 100}) is still within it.
    lineage = [(7, 51), (9, 100)]
    assert within_lineage([(5, 14), (7, 15), (9, 100)], 150, 200, lineage)
    assert not within_lineage([(5, 14)], 40, 200, lineage)
