"""The Arrow batches a task yields: built from decoded columns, they equal what the
records' Python objects give, row for row and type for type."""

import subprocess
import sys

import pyarrow as pa
import pytest

from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.consumer_records import fetched_records
from remotelog.kafka.records import Record, build_batch
from remotelog.spark.reading import HEADER_TYPE, columns_to_arrow, to_arrow


def both(data: bytes, include_headers: bool, **bounds: int) -> tuple[pa.RecordBatch, ...]:
    fetched = fetched_records(data, "orders", 7, **bounds)
    columns = fetched.columns(include_headers)
    return columns_to_arrow(columns, "orders", 7), to_arrow(fetched.records(), include_headers)


@pytest.mark.parametrize("include_headers", [True, False])
@pytest.mark.parametrize("name", ["timeindex_test", "test_topic_a-0"])
def test_shared_segments_give_the_same_batches(kafka_logs, name, include_headers):
    for path in sorted((kafka_logs / name).glob("*.log")):
        from_columns, from_records = both(path.read_bytes(), include_headers)
        assert from_columns.schema == from_records.schema
        assert from_columns.equals(from_records)
        assert from_columns.num_rows > 0


@pytest.mark.parametrize("codec", list(CompressionType))
def test_headers_nulls_and_append_time_give_the_same_batches(codec):
    ts = 1_700_000_000_000
    records = [
        Record(10, ts, None, b"v0", ()),
        Record(11, ts, b"k1", None, (("h", b"x"), ("h", None), ("ü", b""))),
        Record(12, ts + 5, b"", b"v" * 300, (("traceparent", b"00-ab"),)),
    ]
    data = build_batch(records, compression=codec)
    data += build_batch([r._replace(offset=r.offset + 10) for r in records], log_append_time=ts)
    from_columns, from_records = both(data, True, start_offset=11, end_offset=22)
    assert from_columns.equals(from_records)
    assert from_columns.column("offset").to_pylist() == [11, 12, 20, 21]
    assert from_columns.column("timestampType").to_pylist() == [0, 0, 1, 1]
    assert from_columns.column("headers").type == HEADER_TYPE
    assert from_columns.column("headers").to_pylist()[2] is None
    assert from_columns.column("headers").to_pylist()[0] == [
        {"key": "h", "value": b"x"},
        {"key": "h", "value": None},
        {"key": "ü", "value": b""},
    ]
    from_columns.validate(full=True)


def test_a_worker_heap_is_frozen_once():
    # In a fresh interpreter, as a Spark worker starts: the first task freezes what
    # is alive, a later task leaves the count alone.
    code = (
        "import gc\n"
        "from remotelog.spark.reading import freeze_worker_heap\n"
        "before = gc.get_freeze_count()\n"
        "freeze_worker_heap()\n"
        "first = gc.get_freeze_count()\n"
        "kept = [[] for _ in range(1000)]\n"
        "freeze_worker_heap()\n"
        "print(before, first, gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, first, after = map(int, out.stdout.split())
    assert before == 0
    assert first > 10_000  # the imported modules' objects
    assert after == first
