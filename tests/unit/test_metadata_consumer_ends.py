"""The metadata consumer says a partition is at its end when its position reaches the
high watermark of the last fetch response, even when a broker answers a watermark
below the position (no PARTITION_EOF then): librdkafka's watermark cache stands in
for a broker that answers so, which cannot run here."""

import asyncio

from remotelog.metadata.topic import MetadataConsumer


class Watermarks:
    """A consumer's cached watermarks, as the last fetch responses left them."""

    def __init__(self, high: dict[int, int]) -> None:
        self.high = high

    def get_watermark_offsets(self, tp, cached=False):
        assert cached  # never a request to the broker from the consuming loop
        return 0, self.high.get(tp.partition, -1001)


def consumer_at(positions: dict[int, int]) -> MetadataConsumer:
    loop = asyncio.new_event_loop()
    loop.close()  # never delivered to: these tests call the check directly
    consumer = MetadataConsumer(
        {"bootstrap.servers": "127.0.0.1:1"},
        topic="__remote_log_metadata",
        loop=loop,
        sink=lambda records, ends: None,
        fetch_wait_ms=10,
    )
    consumer._generations = dict.fromkeys(positions, 7)
    consumer._positions = dict(positions)
    return consumer


def test_a_position_past_a_low_watermark_is_an_end_once():
    consumer = consumer_at({0: 8, 1: 3, 2: 5})
    watermarks = Watermarks({0: 7, 1: 10, 2: 5})
    # 0: read past a watermark of 7 (a last batch of two records at 6); 1: 7 to go;
    # 2: exactly at the watermark (librdkafka says so too; saying it twice is harmless).
    assert consumer._past_high_watermark(watermarks) == [(0, 7, 8), (2, 7, 5)]
    assert consumer._past_high_watermark(watermarks) == []
    consumer._positions[0] = 9
    watermarks.high[0] = 8
    assert consumer._past_high_watermark(watermarks) == [(0, 7, 9)]


def test_no_end_before_a_fetch_response_or_a_first_record():
    # No fetch response yet (no cached watermark), or still at the logical beginning.
    consumer = consumer_at({0: 4, 1: -2})
    assert consumer._past_high_watermark(Watermarks({1: 0})) == []
