"""`remotelog demo`: the whole flow at a small size, judged by its own report."""

import os
import re
import subprocess
import sys
import uuid

import pytest

from remotelog.core.model import TopicIdPartition
from remotelog.dev.demo import DemoMismatch, WrittenPartition, verify
from remotelog.dev.disk import disk_bytes
from remotelog.dev.kafka_broker import kafka_libs, kafka_version
from remotelog.dev.kafka_demo import MIN_RECORDS as KAFKA_MIN_RECORDS
from remotelog.kafka.consumer_records import ConsumerRecord

RECORDS = 1_500


def report_of(stdout: str) -> dict[str, str]:
    """The report table's rows, by their first column."""
    table = stdout.split("demo ", 1)[1].splitlines()[2:]
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in table if line.strip())


def number(text: str) -> int:
    return int(text.replace(",", ""))


def run_demo_command(tmp_path, *flags: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", "demo", *flags],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return report_of(done.stdout)


def test_kafka_tiers_through_the_plugin_and_serves_it_back_through_kafka_and_spark(tmp_path):
    report = run_demo_command(tmp_path, "--records", str(KAFKA_MIN_RECORDS))
    assert (
        report["broker"] == f"Apache Kafka {kafka_version(kafka_libs())} with the remotelog plugin"
    )
    written, aborted = re.fullmatch(
        r"([\d,]+) \((\d+) aborted\)", report["records written"]
    ).groups()
    verified = number(written) - int(aborted)
    assert int(aborted) == 3 * 50  # the aborted transaction, on each partition
    assert report["records verified"] == (
        f"{verified:,} from local disk, {verified:,} from remotelog (read_committed, through Kafka)"
    )
    segments, megabytes = re.match(
        r"(\d+) segments, ([\d.]+) MB", report["tiered by Kafka"]
    ).groups()
    assert int(segments) >= 3 * 2
    before, after = map(number, re.findall(r"\d[\d,]*", report["bytes local"]))
    assert before > float(megabytes) * 1024 * 1024 > 0
    assert after < 1_000_000  # the active segments only
    assert re.fullmatch(
        r"[\d,]+ records/s from local disk, [\d,]+ records/s from remotelog",
        report["Kafka consumer"],
    )
    assert report["spark"].startswith(f"{verified:,} rows (history from remotelog)")
    files, left = map(int, re.findall(r": (\d+) files, (\d+) after", report["store"])[0])
    assert files >= 3 * int(segments)  # a .log, indexes, a manifest per segment
    assert left == 0


def test_the_sidecar_demo_tiers_verifies_counts_with_spark_and_deletes(tmp_path):
    report = run_demo_command(tmp_path, "--records", str(RECORDS), "--broker", "tansu")
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
    # What is left: each partition's empty active segment and state files, counted
    # by the blocks they take (a 4 KiB block each), as the Kafka demo counts.
    assert after < 64 * 1024 < before
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
    assert done.stderr == (
        f"remotelog: demo: --records 10: at least {KAFKA_MIN_RECORDS} with --broker kafka\n"
    )


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


def test_both_demos_count_a_brokers_disk_by_blocks_not_sizes(tmp_path):
    """A segment's index is preallocated sparse (10 MiB by default): what it takes of the
    disk is what was written, as both demos' "local disk" lines report."""
    partition = tmp_path / "orders-0"
    partition.mkdir()
    (partition / f"{0:020d}.log").write_bytes(os.urandom(64 * 1024))
    with (partition / f"{0:020d}.index").open("wb") as index:
        index.truncate(10 * 1024 * 1024)
    (partition / "nested").mkdir()  # not a file: not counted
    used = disk_bytes([partition])
    assert 64 * 1024 <= used < 1024 * 1024
