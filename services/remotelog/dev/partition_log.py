"""A Kafka partition directory `<topic>-<partition>/`, written and read as a broker does:
the broker that the tests, the benchmarks and `remotelog demo` play. The services
only read such directories (remotelog.scheduler.local_log).

Segments are named by their 20-digit base offset (`.log`, `.index`,
`.timeindex`, `.txnindex`); a producer snapshot `<offset>.snapshot` is taken at
every roll; `leader-epoch-checkpoint` and `partition.metadata` sit beside
them. Index entries are appended to their files as batches arrive (Kafka's
`LogSegment.append`: an entry every `index.interval.bytes`, pointing at the
start of the batch and naming its last offset), so any reader of the directory
sees them. Reopening a directory whose last batch is torn truncates it after
the last batch with a valid CRC, as Kafka's recovery does.

The high watermark is Kafka's `replication-offset-checkpoint` in the parent
log dir; the last stable offset is derived from the log itself (the oldest
transaction without a marker), so a sidecar reading the directory can respect
it without asking the broker.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from remotelog.kafka.codecs import CompressionType
from remotelog.kafka.indexes import (
    OFFSET_ENTRIES,
    TIME_ENTRY,
    AbortedTxn,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    transaction_index_bytes,
)
from remotelog.kafka.records import (
    BatchHeader,
    CorruptBatchError,
    Record,
    build_batch,
    build_control_batch,
    iter_batches,
)
from remotelog.kafka.state_files import (
    HW_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    CorruptStateFileError,
    ProducerStateEntry,
    leader_epoch_checkpoint_text,
    parse_leader_epoch_checkpoint,
    parse_partition_metadata,
    parse_producer_snapshot,
    partition_metadata_text,
    producer_snapshot_bytes,
    read_hw_checkpoint,
    replace_file,
    segment_name,
    write_hw_checkpoint,
)


@dataclass(frozen=True)
class LogConfig:
    """Kafka's topic settings for segment layout (same names, same defaults)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    # 8 as Kafka writes before metadata version 4.4-IV1; 12 after it (KIP-1333).
    offset_index_entry_bytes: int = 8

    def __post_init__(self) -> None:
        if self.offset_index_entry_bytes not in {e.size for e in OFFSET_ENTRIES}:
            raise ValueError(f"offset_index_entry_bytes {self.offset_index_entry_bytes}: 8 or 12")

    @property
    def offset_entry(self) -> struct.Struct:
        return next(e for e in OFFSET_ENTRIES if e.size == self.offset_index_entry_bytes)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


@dataclass
class LogSegment:
    directory: Path
    base_offset: int
    created_ms: int
    size: int = 0
    next_offset: int = -1
    offset_index: OffsetIndex = field(init=False)
    time_index: TimeIndex = field(init=False)
    bytes_since_index: int = 0
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1

    def __post_init__(self) -> None:
        self.offset_index = OffsetIndex(self.base_offset)
        self.time_index = TimeIndex(self.base_offset)
        if self.next_offset < 0:
            self.next_offset = self.base_offset

    def path(self, suffix: str) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}{suffix}"

    def track(self, header: BatchHeader, config: LogConfig, write_index: bool) -> None:
        """Kafka's LogSegment.append bookkeeping for a batch stored at header.position."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.bytes_since_index > config.index_interval_bytes:
            relative = header.last_offset - self.base_offset
            self.offset_index.append(header.last_offset, header.position)
            added = self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            if write_index:
                with self.path(".index").open("ab") as f:
                    f.write(config.offset_entry.pack(relative, header.position))
                if added:
                    with self.path(".timeindex").open("ab") as f:
                        relative_max = self.offset_of_max_timestamp - self.base_offset
                        f.write(TIME_ENTRY.pack(self.max_timestamp, relative_max))
            self.bytes_since_index = 0
        self.bytes_since_index += header.size
        self.size = header.position + header.size
        self.next_offset = header.last_offset + 1

    def index_full(self, config: LogConfig) -> bool:
        max_entries = config.segment_index_bytes // config.offset_entry.size
        return len(self.offset_index.entries) >= max_entries


@dataclass
class _ProducerState:
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


class PartitionLog:
    """One partition directory: append, roll, read, delete, recover."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.config = config or LogConfig()
        self.clock = clock
        self.segments: list[LogSegment] = []
        self.leader_epochs: list[tuple[int, int]] = []
        self.producers: dict[int, _ProducerState] = {}
        self.log_start_offset = 0
        self._high_watermark: int | None = None

    # ------------------------------------------------------------ opening

    @classmethod
    def create(
        cls,
        log_dir: Path,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        config: LogConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> PartitionLog:
        directory = log_dir / partition_dir_name(topic, partition)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / PARTITION_METADATA).write_text(partition_metadata_text(topic_id))
        return cls.open(directory, config, clock)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> PartitionLog:
        log = cls(directory, config, clock)
        log._load()
        return log

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _load(self) -> None:
        checkpoint = self.directory / LEADER_EPOCH_CHECKPOINT
        if checkpoint.exists():
            self.leader_epochs = parse_leader_epoch_checkpoint(
                checkpoint.read_text(), str(checkpoint)
            )
        paths = sorted(self.directory.glob("*.log"))
        replay_from = self._load_producer_snapshot(paths)
        for number, log_path in enumerate(paths):
            segment = LogSegment(self.directory, int(log_path.stem), self._now_ms())
            rolled = segment.base_offset < replay_from and number + 1 < len(paths)
            # Below the latest snapshot and rolled: trusted as Kafka trusts segments
            # below its recovery point; only the indexes are read (rebuilt if unusable).
            if not (rolled and self._load_rolled(segment, next_base=int(paths[number + 1].stem))):
                self._replay(segment, log_path, track_producers=not rolled)
                if rolled:
                    self._write_indexes(segment)
            self.segments.append(segment)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        self.log_start_offset = self.segments[0].base_offset
        topic, _, partition = self.directory.name.rpartition("-")
        if partition.isdigit():
            checkpoint_hw = read_hw_checkpoint(self.directory.parent / HW_CHECKPOINT)
            self._high_watermark = checkpoint_hw.get((topic, int(partition)))
        # Rewrite the active segment's indexes from the replay: they may be stale or torn.
        self._write_indexes(self.segments[-1])

    def _load_producer_snapshot(self, paths: list[Path]) -> int:
        """Producer state from the newest snapshot at a segment base; the offset to replay from."""
        bases = {int(p.stem) for p in paths}
        snapshots = sorted(
            (int(p.stem), p) for p in self.directory.glob("*.snapshot") if int(p.stem) in bases
        )
        if not snapshots:
            return 0
        offset, path = snapshots[-1]
        try:
            entries = parse_producer_snapshot(path.read_bytes(), str(path))
        except CorruptStateFileError:
            return 0  # replay everything instead, as Kafka does without a usable snapshot
        for e in entries:
            self.producers[e.producer_id] = _ProducerState(
                e.producer_epoch,
                e.last_sequence,
                e.last_offset,
                e.offset_delta,
                e.timestamp,
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
        return offset

    def _load_rolled(self, segment: LogSegment, next_base: int) -> bool:
        """Load a rolled segment from its indexes; False when they are missing or corrupt."""
        try:
            offset_index = OffsetIndex.parse(
                segment.path(".index").read_bytes(),
                segment.base_offset,
                str(segment.path(".index")),
                log_size=segment.path(".log").stat().st_size,
            )
            time_index = TimeIndex.parse(
                segment.path(".timeindex").read_bytes(),
                segment.base_offset,
                str(segment.path(".timeindex")),
            )
            size = segment.path(".log").stat().st_size
        except (OSError, CorruptIndexError):
            return False
        segment.offset_index, segment.time_index = offset_index, time_index
        segment.size, segment.next_offset = size, next_base
        return True

    def _replay(self, segment: LogSegment, log_path: Path, track_producers: bool = True) -> None:
        data = log_path.read_bytes()
        good = 0
        try:
            for header in iter_batches(data, source=str(log_path)):
                segment.track(header, self.config, write_index=False)
                if track_producers:
                    self._track_producer(header)
                good = header.position + header.size
        except CorruptBatchError:
            # Kafka's recovery: keep every batch before the first invalid one.
            with log_path.open("r+b") as f:
                f.truncate(good)
        segment.size = good

    def _write_indexes(self, segment: LogSegment) -> None:
        segment.path(".index").write_bytes(segment.offset_index.to_bytes())
        segment.path(".timeindex").write_bytes(segment.time_index.to_bytes())

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(self.directory, base_offset, self._now_ms())
        for suffix in (".log", ".index", ".timeindex"):
            segment.path(suffix).touch()
        return segment

    # ------------------------------------------------------------ state

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def topic_id(self) -> uuid.UUID:
        path = self.directory / PARTITION_METADATA
        return parse_partition_metadata(path.read_text(), str(path))

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset if self._high_watermark is None else self._high_watermark

    def set_high_watermark(self, offset: int) -> None:
        """Record the high watermark in Kafka's replication-offset-checkpoint of the log dir."""
        self._high_watermark = min(offset, self.log_end_offset)
        topic, _, partition = self.directory.name.rpartition("-")
        path = self.directory.parent / HW_CHECKPOINT
        entries = read_hw_checkpoint(path)
        entries[(topic, int(partition))] = self._high_watermark
        write_hw_checkpoint(path, entries)

    @property
    def last_stable_offset(self) -> int:
        ongoing = [p.current_txn_first_offset for p in self.producers.values()]
        first_open = min((o for o in ongoing if o >= 0), default=None)
        return self.high_watermark if first_open is None else min(first_open, self.high_watermark)

    # ------------------------------------------------------------ writing

    def append(
        self,
        records: Sequence[Record | tuple[bytes | None, bytes | None]],
        *,
        leader_epoch: int,
        timestamp_ms: int | None = None,
        compression: CompressionType = CompressionType.NONE,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
    ) -> BatchHeader:
        """Append one batch; offsets are assigned here.

        `records` are Records (their offsets are replaced) or (key, value) pairs
        stamped with `timestamp_ms` or the clock.
        """
        now = self._now_ms() if timestamp_ms is None else timestamp_ms
        base = self.log_end_offset
        batch_records = [
            Record(base + i, r.timestamp, r.key, r.value, r.headers)
            if isinstance(r, Record)
            else Record(base + i, now, r[0], r[1])
            for i, r in enumerate(records)
        ]
        base_sequence = -1
        if producer_id >= 0:
            state = self.producers.get(producer_id)
            base_sequence = 0 if state is None else state.last_sequence + 1
        batch = build_batch(
            batch_records,
            compression=compression,
            partition_leader_epoch=leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            transactional=transactional,
        )
        return self._append_batch(batch, leader_epoch)

    def append_marker(
        self,
        *,
        commit: bool,
        producer_id: int,
        producer_epoch: int,
        leader_epoch: int,
        coordinator_epoch: int = 0,
    ) -> BatchHeader:
        """End the producer's transaction with a COMMIT or ABORT marker."""
        batch = build_control_batch(
            self.log_end_offset,
            self._now_ms(),
            commit=commit,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            partition_leader_epoch=leader_epoch,
        )
        state = self.producers.get(producer_id)
        first = state.current_txn_first_offset if state else -1
        header = self._append_batch(batch, leader_epoch)
        if not commit and first >= 0:
            aborted = AbortedTxn(producer_id, first, header.last_offset, self.last_stable_offset)
            with self.active_segment.path(".txnindex").open("ab") as f:
                f.write(transaction_index_bytes([aborted]))
        return header

    def _append_batch(self, batch: bytes, leader_epoch: int) -> BatchHeader:
        (header,) = iter_batches(batch)
        segment = self.active_segment
        if self._should_roll(segment, header):
            self.roll()
            segment = self.active_segment
        if not self.leader_epochs or leader_epoch > self.leader_epochs[-1][0]:
            self.leader_epochs.append((leader_epoch, header.base_offset))
            replace_file(
                self.directory / LEADER_EPOCH_CHECKPOINT,
                leader_epoch_checkpoint_text(self.leader_epochs).encode(),
            )
        with segment.path(".log").open("ab") as f:
            f.write(batch)
            f.flush()
        placed = header._replace(position=segment.size)
        segment.track(placed, self.config, write_index=True)
        self._track_producer(placed)
        return placed

    def _should_roll(self, segment: LogSegment, header: BatchHeader) -> bool:
        if segment.size == 0:
            return False
        return (
            segment.size + header.size > self.config.segment_bytes
            or self._now_ms() - segment.created_ms >= self.config.segment_ms
            or segment.index_full(self.config)
            or header.last_offset - segment.base_offset > 2**31 - 1
        )

    def roll(self) -> None:
        """Start a new active segment at the log end offset, snapshotting producer state."""
        base = self.log_end_offset
        snapshot = [
            ProducerStateEntry(
                pid,
                s.epoch,
                s.last_sequence,
                s.last_offset,
                s.offset_delta,
                s.timestamp,
                s.coordinator_epoch,
                s.current_txn_first_offset,
            )
            for pid, s in sorted(self.producers.items())
        ]
        replace_file(
            self.directory / f"{segment_name(base)}.snapshot", producer_snapshot_bytes(snapshot)
        )
        self.segments.append(self._new_segment(base))

    def _track_producer(self, header: BatchHeader) -> None:
        """Producer state as Kafka's ProducerStateManager keeps it, for snapshots and the LSO."""
        if header.producer_id < 0:
            return
        state = self.producers.get(header.producer_id)
        if header.is_control:
            if state is not None:
                state.current_txn_first_offset = -1
            return
        last_sequence = header.base_sequence + header.last_offset_delta
        if state is None:
            state = _ProducerState(header.producer_epoch, last_sequence, header.last_offset, 0, 0)
            self.producers[header.producer_id] = state
        state.epoch = header.producer_epoch
        state.last_sequence = last_sequence
        state.last_offset = header.last_offset
        state.offset_delta = header.last_offset_delta
        state.timestamp = header.max_timestamp
        if header.is_transactional and state.current_txn_first_offset < 0:
            state.current_txn_first_offset = header.base_offset

    # ------------------------------------------------------------ reading

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `offset`, up to max_bytes (at least one batch)."""
        if not self.log_start_offset <= offset < self.log_end_offset:
            raise ValueError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset})"
            )
        segment = next(s for s in reversed(self.segments) if s.base_offset <= offset)
        data = segment.path(".log").read_bytes()
        start = segment.offset_index.lookup(offset).position
        out = bytearray()
        for header in iter_batches(data, start=start, source=str(segment.path(".log"))):
            if header.last_offset < offset:
                continue
            if out and len(out) + header.size > max_bytes:
                break
            out += data[header.position : header.position + header.size]
        return bytes(out)

    # ------------------------------------------------------------ deleting

    def delete_segments_below(self, offset: int) -> list[int]:
        """Delete non-active segments wholly below `offset`; returns their base offsets."""
        deleted = []
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            segment = self.segments.pop(0)
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                segment.path(suffix).unlink(missing_ok=True)
            deleted.append(segment.base_offset)
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        for snapshot in self.directory.glob("*.snapshot"):
            if int(snapshot.stem) < self.log_start_offset:
                snapshot.unlink()
        return deleted
