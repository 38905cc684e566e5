"""`remotelog demo`: the whole flow at a small size, judged by its own report."""

import re
import subprocess
import sys
import uuid

import pytest

from remotelog.core.model import TopicIdPartition
from remotelog.dev.demo import MIN_RECORDS, DemoMismatch, WrittenPartition, verify
from remotelog.kafka.consumer_records import ConsumerRecord

RECORDS = 1_500


def report_of(stdout: str) -> dict[str, str]:
    """The report table's rows, by their first column."""
    table = stdout.split("demo ", 1)[1].splitlines()[2:]
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in table if line.strip())


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_demo_tiers_verifies_counts_with_spark_and_deletes(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", "demo", "--records", str(RECORDS)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_of(done.stdout)
    line = report["records written"]
    written, aborted = re.fullmatch(r"([\d,]+) \((\d+) aborted\)", line).groups()
    assert number(written) == RECORDS
    assert number(aborted) == 50  # the aborted transaction's batch
    verified = number(report["records verified"].split()[0])
    assert verified == number(written) - number(aborted)
    tiered, rolled = re.fullmatch(r"(\d+) of (\d+) rolled", report["segments tiered"]).groups()
    assert tiered == rolled
    assert int(rolled) >= 3 * 3
    before, after = map(number, re.findall(r"\d[\d,]*", report["bytes local"]))
    assert before > 100 * RECORDS
    assert after < 1024  # what is left: the empty active segments and the state files
    assert report["spark"].startswith(f"{verified:,} rows")
    files, left = map(int, re.findall(r": (\d+) files, (\d+) after", report["store"])[0])
    assert files >= 3 * int(tiered)  # a .log, indexes, a manifest per segment at least
    assert left == 0


def test_too_few_records_is_a_one_line_error():
    done = subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", "demo", "--records", "10"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == f"remotelog: demo: --records 10: at least {MIN_RECORDS}\n"


class ReadBack:
    """Stands in for the TieredConsumer: the records a read returns."""

    def __init__(self, records):
        self.records = records

    async def read(self, partition, start):
        for record in self.records:
            yield record


def written_partition(expected):
    tip = TopicIdPartition(uuid.uuid4(), "demo", 0)
    return WrittenPartition(None, tip, expected, [len(expected) - 1], len(expected), 0)


def read_record(offset, value):
    return ConsumerRecord("demo", 0, offset, 1_000, 0, b"k", value, (), 0)


async def test_the_first_differing_record_is_named():
    expected = [(o, 1_000, b"k", b"v%d" % o, ()) for o in range(3)]
    read = [read_record(0, b"v0"), read_record(1, b"changed"), read_record(2, b"v2")]
    with pytest.raises(DemoMismatch) as failure:
        await verify(ReadBack(read), [written_partition(expected)])
    assert str(failure.value) == (
        "demo-0: read (1, 1000, b'k', b'changed', ()), written (1, 1000, b'k', b'v1', ())"
    )


async def test_a_missing_record_is_a_mismatch():
    expected = [(o, 1_000, b"k", b"v%d" % o, ()) for o in range(3)]
    read = [read_record(0, b"v0"), read_record(1, b"v1")]
    with pytest.raises(DemoMismatch, match="demo-0: read 2 records, written 3"):
        await verify(ReadBack(read), [written_partition(expected)])
