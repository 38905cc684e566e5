"""Record batches for the decoder tests: a sample with every field shape, and
hypothesis-mutated copies of it."""

from __future__ import annotations

from hypothesis import strategies as st

from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.records import Record, build_batch


def sample_records(base: int = 1_000, ts: int = 1_700_000_000_000) -> list[Record]:
    """Null keys and values, empty ones, repeated and non-ASCII header keys, null
    header values, an offset gap and a timestamp earlier than the batch's first."""
    return [
        Record(base, ts, None, b"v0", ()),
        Record(base + 1, ts, b"k1", None, (("h", b"x"), ("h", None), ("ü", b""))),
        Record(base + 2, ts + 5, b"", b"v" * 300, (("traceparent", b"00-ab"),)),
        Record(base + 7, ts - 3, b"k" * 200, b"", ()),
    ]


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    """A sample batch of any codec with a few bytes changed, maybe cut short."""
    codec = draw(st.sampled_from(list(CompressionType)))
    data = bytearray(build_batch(sample_records(), compression=codec))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(data) - 1))
        data[position] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) if draw(st.booleans()) else bytes(data)
