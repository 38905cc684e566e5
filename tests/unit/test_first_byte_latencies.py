"""When a bulk reader hedges a GET: past a percentile of its recent GETs, within a budget."""

import random

from remotelog.client.url_ranges import FirstByteLatencies


def _read(latencies: FirstByteLatencies, seconds: list[float]) -> int:
    """GETs with these first-byte times, each hedged when late and the budget allows,
    each recorded as UrlRangeReader records it; the GETs hedged."""
    hedged = 0
    for taken in seconds:
        threshold = latencies.hedge_after()
        if threshold is not None and taken > threshold and latencies.take_hedge():
            hedged += 1
        latencies.add(taken)
    return hedged


def test_the_threshold_stays_at_the_percentile_of_all_gets_late_ones_included():
    latencies = FirstByteLatencies(95.0)
    rng = random.Random(5)
    hedged = _read(latencies, [rng.uniform(0.0, 0.1) for _ in range(5000)])
    # Late GETs are samples too, so the threshold does not creep down under the tail.
    threshold = latencies.hedge_after()
    assert threshold is not None
    assert 0.09 <= threshold <= 0.1
    assert 0.03 * 5000 <= hedged <= 0.05 * 5000 + 10


def test_a_link_that_makes_every_get_late_gets_a_hedge_in_20_at_most():
    latencies = FirstByteLatencies(95.0)
    _read(latencies, [0.01] * 100)
    # Every GET now comes late (a saturated link): hedges spend the budget, then one
    # GET in twenty, not every GET.
    hedged = _read(latencies, [0.05 + i / 10_000 for i in range(2000)])
    assert hedged <= 10 + 2000 * 0.05
    assert hedged >= 10
