"""`remotelog dump-log`: print the batches of segments, in the spirit of kafka-dump-log.sh."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remotelog.kafka.indexes import CorruptIndexError, OffsetIndex, TimeIndex
from remotelog.kafka.records import BatchHeader, CorruptBatchError, decode_records, iter_batches


@dataclass
class DumpSummary:
    segments: int = 0
    batches: int = 0
    records: int = 0
    problems: int = 0


def log_files(target: Path) -> list[Path]:
    if target.is_dir():
        return sorted(target.glob("*.log"))
    return [target]


def _batch_line(h: BatchHeader) -> str:
    time_type = "LogAppendTime" if h.is_log_append_time else "CreateTime"
    last_sequence = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} "
        f"isControl: {str(h.is_control).lower()} position: {h.position} "
        f"{time_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {h.compression.name.lower()} crc: {h.crc} isvalid: true"
    )


def _show(value: bytes | None) -> str:
    return "null" if value is None else value.decode("utf-8", "backslashreplace")


def _verify_index(
    log: Path, data: bytes, batches: list[BatchHeader], out: Callable[[str], None]
) -> int:
    base = int(log.stem)
    by_position = {b.position: b for b in batches}
    problems = 0
    try:
        index = OffsetIndex.parse(
            log.with_suffix(".index").read_bytes(),
            base,
            str(log.with_suffix(".index")),
            log_size=len(data),
        )
        TimeIndex.parse(
            log.with_suffix(".timeindex").read_bytes(), base, str(log.with_suffix(".timeindex"))
        )
    except (OSError, CorruptIndexError) as exc:
        out(f"Index problem: {exc}")
        return 1
    for entry in index.entries:
        batch = by_position.get(entry.position)
        if batch is None or batch.last_offset != entry.offset:
            problems += 1
            out(
                f"Index mismatch: offset {entry.offset} -> position {entry.position}: "
                "no batch ending at that offset starts there"
            )
    out(
        f"Offset index {log.with_suffix('.index').name}: "
        f"{len(index.entries)} entries, {problems} mismatches"
    )
    return problems


def dump(
    target: Path, *, print_data: bool, verify_index: bool, out: Callable[[str], None]
) -> DumpSummary:
    summary = DumpSummary()
    for log in log_files(target):
        out(f"Dumping {log}")
        data = log.read_bytes()
        summary.segments += 1
        batches: list[BatchHeader] = []
        try:
            for header in iter_batches(data, source=str(log)):
                batches.append(header)
                out(_batch_line(header))
                summary.batches += 1
                summary.records += header.records_count
                if print_data:
                    for r in decode_records(data, header, source=str(log)):
                        keys = ",".join(k for k, _ in r.headers)
                        out(
                            f"| offset: {r.offset} timestamp: {r.timestamp} "
                            f"headerKeys: [{keys}] key: {_show(r.key)} payload: {_show(r.value)}"
                        )
        except CorruptBatchError as exc:
            summary.problems += 1
            out(f"Corrupt: {exc}")
            continue
        if verify_index:
            summary.problems += _verify_index(log, data, batches, out)
    state = "all CRCs valid" if not summary.problems else f"{summary.problems} problem(s)"
    out(
        f"Summary: {summary.segments} segment(s), {summary.batches} batches, "
        f"{summary.records} records, {state}"
    )
    return summary
