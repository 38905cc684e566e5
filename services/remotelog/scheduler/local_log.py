"""A sidecar's view of one partition directory written by the broker beside it.

The scheduler never writes a broker's files except to delete segments local
retention allows. Each run takes a fresh, cheap look: the segment files and
their sizes (a directory listing), the leader-epoch checkpoint, and the high
watermark from the log dir's `replication-offset-checkpoint`. The last stable
offset and a segment's largest timestamp need the records and are computed
only when a run needs them, from batch headers only.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from remotelog.core.errors import RemoteLogError
from remotelog.kafka.records import BatchHeader, CorruptBatchError, iter_batches
from remotelog.kafka.state_files import (
    HW_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    CorruptStateFileError,
    parse_leader_epoch_checkpoint,
    parse_producer_snapshot,
    read_hw_checkpoint,
    segment_name,
)

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


@dataclass(frozen=True)
class LocalSegment:
    directory: Path
    base_offset: int
    size: int
    # Base offset of the next segment; None for the active segment.
    next_offset: int | None

    def path(self, suffix: str) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}{suffix}"

    @property
    def end_offset(self) -> int:
        """Last offset of a rolled segment (Kafka: next segment's base - 1)."""
        if self.next_offset is None:
            raise ValueError("the active segment has no end offset yet")
        return self.next_offset - 1


def _headers(path: Path) -> Iterator[BatchHeader]:
    """Batch headers of a segment file; stops quietly at a torn tail (the broker may be writing)."""
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                yield from iter_batches(view, source=str(path), verify_crc=False)
            except CorruptBatchError:
                return
            finally:
                view.release()


def largest_timestamp(segment: LocalSegment, log: Path | None = None) -> int:
    """The segment's largest record timestamp (Kafka's LogSegment.largestTimestamp); -1 if empty.

    `log`: where to read its .log instead of by name (a descriptor a copy holds)."""
    return max((h.max_timestamp for h in _headers(log or segment.path(".log"))), default=-1)


class HighWatermarkCheckpoints:
    """Each log dir's `replication-offset-checkpoint`, parsed once per version of the file.

    The file holds a line for every partition of the log dir, and every run of
    every partition needs its own line: parsing it per scan costs O(partitions)
    each time, O(partitions^2) per task interval.
    Kafka replaces the file by rename (as does PartitionLog), so inode, mtime
    and size name a version, except that a file changed again within the
    filesystem's timestamp tick can look the same: as git does with its index,
    a parse is kept only when it began well after the file's mtime. Scans run
    in worker threads; a race parses twice and keeps either result.
    """

    # Longer than any filesystem's timestamp tick (jiffies: 1-10 ms).
    RACY_NS = 50_000_000

    def __init__(self) -> None:
        self._parsed: dict[Path, tuple[tuple[int, int, int], dict[tuple[str, int], int]]] = {}

    def read(self, path: Path) -> dict[tuple[str, int], int]:
        """{(topic, partition): high watermark}; empty when the file is missing or unreadable."""
        began_ns = time.time_ns()
        try:
            stat = os.stat(path)
            version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            cached = self._parsed.get(path)
            if cached is not None and cached[0] == version:
                return cached[1]
            entries = read_hw_checkpoint(path)
        except (OSError, ValueError):
            return {}
        if began_ns - stat.st_mtime_ns > self.RACY_NS:
            self._parsed[path] = (version, entries)
        return entries


@dataclass(frozen=True)
class LocalLog:
    directory: Path
    segments: tuple[LocalSegment, ...]
    leader_epochs: tuple[tuple[int, int], ...]
    high_watermark: int | None

    @classmethod
    def scan(cls, directory: Path, checkpoints: HighWatermarkCheckpoints | None = None) -> LocalLog:
        """The directory as it is now; a missing directory has no segments.

        `checkpoints` keeps the parsed high-watermark files between scans (a
        scheduler owns one); without it the file is read afresh.
        """
        bases: list[tuple[int, int]] = []
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            stem, dot, suffix = entry.name.partition(".")
            if suffix == "log" and dot and stem.isdigit() and len(stem) == 20:
                try:
                    bases.append((int(stem), entry.stat().st_size))
                except FileNotFoundError:
                    continue  # deleted between the listing and the stat
        bases.sort()
        segments = tuple(
            LocalSegment(directory, base, size, bases[i + 1][0] if i + 1 < len(bases) else None)
            for i, (base, size) in enumerate(bases)
        )
        epochs: list[tuple[int, int]] = []
        checkpoint = directory / LEADER_EPOCH_CHECKPOINT
        try:
            epochs = parse_leader_epoch_checkpoint(checkpoint.read_text(), str(checkpoint))
        except FileNotFoundError:
            pass  # a new partition; a copy then refuses segments the epochs do not cover
        except CorruptStateFileError as error:
            # Copying with a wrong lineage would tier segments under the wrong epochs.
            raise RemoteLogError(f"cannot copy from {directory}: {error}") from None
        topic, _, partition = directory.name.rpartition("-")
        high_watermark = None
        if partition.isdigit():
            checkpoint_hw = (checkpoints or HighWatermarkCheckpoints()).read(
                directory.parent / HW_CHECKPOINT
            )
            high_watermark = checkpoint_hw.get((topic, int(partition)))
        return cls(directory, segments, tuple(epochs), high_watermark)

    @property
    def rolled(self) -> tuple[LocalSegment, ...]:
        return self.segments[:-1]

    @property
    def local_log_start_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def size_above(self, offset: int) -> int:
        """Bytes of segments holding offsets after `offset` (Kafka's onlyLocalLogSegmentsSize)."""
        return sum(
            s.size for s in self.segments if s.next_offset is None or s.next_offset - 1 > offset
        )

    def producer_snapshot(self, offset: int) -> Path | None:
        """The producer snapshot taken when the segment ending at offset - 1 was rolled."""
        path = self.directory / f"{segment_name(offset)}.snapshot"
        return path if path.exists() else None

    def end_state(self) -> tuple[int, int]:
        """(log end offset, last stable offset), from batch headers.

        Open transactions come from the newest producer snapshot at or below
        the active segment's base plus the batches after it; the LSO is the
        first offset of the oldest open transaction, capped by the high
        watermark (the broker's checkpoint; the log end when there is none).
        """
        if not self.segments:
            return 0, 0
        snapshots = sorted(
            int(p.stem)
            for p in self.directory.glob("*.snapshot")
            if p.stem.isdigit() and int(p.stem) <= self.segments[-1].base_offset
        )
        open_txns: dict[int, int] = {}
        replay_from = self.segments[0].base_offset
        for offset in reversed(snapshots):
            path = self.directory / f"{segment_name(offset)}.snapshot"
            try:
                entries = parse_producer_snapshot(path.read_bytes(), str(path))
            except (OSError, CorruptStateFileError):
                continue
            open_txns = {
                e.producer_id: e.current_txn_first_offset
                for e in entries
                if e.current_txn_first_offset >= 0
            }
            replay_from = offset
            break
        log_end = self.segments[-1].base_offset
        # A segment deleted since the scan (local retention of a concurrent run, or
        # the broker's): its transactions are unknown, and so is its end if it was
        # the active one then, so nothing from its start on counts as stable, and
        # the log ends no earlier than it began, until the next scan.
        vanished_at: int | None = None
        for segment in self.segments:
            if segment.next_offset is not None and segment.next_offset <= replay_from:
                continue
            try:  # the file is opened before the first header: nothing half-read
                for header in _headers(segment.path(".log")):
                    log_end = header.last_offset + 1
                    if header.base_offset < replay_from or header.producer_id < 0:
                        continue
                    if header.is_control:
                        open_txns.pop(header.producer_id, None)
                    elif header.is_transactional:
                        open_txns.setdefault(header.producer_id, header.base_offset)
            except FileNotFoundError:
                # Even the scan's active segment: rolled, tiered and deleted since.
                vanished_at = segment.base_offset if vanished_at is None else vanished_at
            if segment.next_offset is not None:
                log_end = max(log_end, segment.next_offset)
        high_watermark = log_end if self.high_watermark is None else self.high_watermark
        stable = min(high_watermark, log_end)
        if open_txns:
            stable = min(stable, min(open_txns.values()))
        if vanished_at is not None:
            stable = min(stable, vanished_at)
        return log_end, stable

    def delete(self, segment: LocalSegment) -> None:
        """Remove a rolled segment's files, the log first so readers stop seeing it at once."""
        if segment.next_offset is None:
            raise ValueError("the active segment is never deleted")
        for suffix in SEGMENT_SUFFIXES:
            segment.path(suffix).unlink(missing_ok=True)
        snapshot = self.directory / f"{segment_name(segment.base_offset)}.snapshot"
        snapshot.unlink(missing_ok=True)
