"""How a stream's micro-batch ends are capped by maxOffsetsPerTrigger, as Spark's Kafka
source caps them (KafkaMicroBatchStream.rateLimit)."""

from remotelog.spark.stream import rate_limit


def test_the_limit_is_shared_in_proportion_to_what_each_partition_has_waiting():
    begin = {("t", 0): 100, ("t", 1): 0}
    ends = {("t", 0): 400, ("t", 1): 100}
    # 300 and 100 waiting, 40 allowed: 30 and 10.
    assert rate_limit(begin, ends, 40) == {("t", 0): 130, ("t", 1): 10}


def test_a_partition_with_little_waiting_is_not_starved():
    begin = {("t", 0): 0, ("t", 1): 0}
    ends = {("t", 0): 10_000, ("t", 1): 1}
    # 1 of 10,001 waiting: its share rounds up to one offset, the rest's down.
    assert rate_limit(begin, ends, 100) == {("t", 0): 99, ("t", 1): 1}


def test_nothing_waiting_or_a_limit_above_it_leaves_the_ends():
    begin = {("t", 0): 5, ("t", 1): 7}
    assert rate_limit(begin, {("t", 0): 5, ("t", 1): 7}, 10) == {("t", 0): 5, ("t", 1): 7}
    assert rate_limit(begin, {("t", 0): 8, ("t", 1): 9}, 100) == {("t", 0): 8, ("t", 1): 9}
