"""Kafka formats: record decoding and shallow batch iteration on the shared broker segments.

Figures (DESIGN.md): full decode records/s against aiokafka's C-accelerated
decoder (target 1.0x) and kafka-python's pure-Python one (target 3x); shallow
iteration MB/s against a CRC-only pass over the same bytes.
Run: .venv/bin/python bench/formats.py [path-to-kafka-logs]
"""

from __future__ import annotations

import sys
from pathlib import Path

import crc32c
from aiokafka.record.memory_records import MemoryRecords as AioRecords
from common import Report, best_of
from kafka.record.memory_records import MemoryRecords as KpRecords

from remotelog.kafka.records import HEADER_SIZE, decode_records, iter_batches

DEFAULT_LOGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "kafka-logs"


def load(logs: Path) -> list[bytes]:
    return [
        p.read_bytes()
        for d in sorted(logs.iterdir())
        if d.is_dir()
        for p in sorted(d.glob("*.log"))
    ]


def ours(segments: list[bytes]) -> int:
    n = 0
    for data in segments:
        for header in iter_batches(data, verify_crc=False):
            n += len(decode_records(data, header))
    return n


def with_library(memory_records_cls, segments: list[bytes]) -> int:  # type: ignore[no-untyped-def]
    """The library's own path end to end: its MemoryRecords splits batches, its batch decodes."""
    n = 0
    for data in segments:
        records = memory_records_cls(data)
        while (batch := records.next_batch()) is not None:
            for record in batch:
                record.offset, record.timestamp, record.key, record.value, record.headers  # noqa: B018
                n += 1
    return n


def shallow(segments: list[bytes]) -> int:
    return sum(1 for data in segments for _ in iter_batches(data, verify_crc=True))


def crc_only(segments: list[bytes]) -> int:
    n = 0
    for data in segments:
        view = memoryview(data)
        position = 0
        while position < len(data):
            size = int.from_bytes(view[position + 8 : position + 12], "big") + 12
            crc32c.crc32c(view[position + 21 : position + size])
            position += size
            n += 1
    return n


def main() -> None:
    logs = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_LOGS
    segments = load(logs)
    total_bytes = sum(len(s) for s in segments)
    records = ours(segments)
    assert records == with_library(AioRecords, segments) == with_library(KpRecords, segments)
    t_ours = best_of(3, lambda: ours(segments))
    t_aio = best_of(3, lambda: with_library(AioRecords, segments))
    t_kp = best_of(2, lambda: with_library(KpRecords, segments))
    t_shallow = best_of(5, lambda: shallow(segments))
    t_crc = best_of(5, lambda: crc_only(segments))
    report = Report("formats")
    report.info(
        "decode_records_per_s",
        remotelog=round(records / t_ours),
        aiokafka=round(records / t_aio),
        kafka_python=round(records / t_kp),
    )
    report.info(
        "shallow_mb_per_s",
        remotelog=round(total_bytes / t_shallow / 1e6),
        crc_only=round(total_bytes / t_crc / 1e6),
        header_size=HEADER_SIZE,
    )
    report.ratio("decode_vs_aiokafka", t_aio / t_ours, 1.0)
    report.ratio("decode_vs_kafka_python", t_kp / t_ours, 3.0)
    report.ratio("shallow_vs_crc_only", t_crc / t_shallow, None)
    for f in report.figures[:2]:
        print(f)
    report.finish()


if __name__ == "__main__":
    main()
