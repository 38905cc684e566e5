"""The chaos soak: the whole stack under crashes and S3 faults, then an audit.

A writer appends to PartitionLogs as a broker does, rolling small segments; the
copy scheduler tiers them and local retention deletes them; readers fetch random
offsets through the fetch service and check every record against what was
written; remote retention deletes the oldest segments. Meanwhile a killer
SIGKILLs, in turn, each service, the broker and Redis, restarting each where it
was, and makes the segment store's S3 server fail requests (5xx, dropped
connections). Then the audit: every segment the metadata says is tiered is
byte-identical to what the writer rolled, the tiered range has no gap and holds
everything the scheduler acknowledged, a scrub leaves no orphan, and a metadata
manager restarted from its snapshot answers exactly as a full replay does.

Records are a function of (partition, offset), so nothing written is kept in
memory; each rolled segment's .log is hard-linked before the scheduler may tier
it, so its bytes survive local retention for the audit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from support.servers import RedisServer, S3Server
from support.services import load_properties, loading_state
from support.waiting import eventually

from remotelog.cli.scrub import run_scrub
from remotelog.client import ClientOptions, MetadataClient, SegmentStoreClient
from remotelog.client.copy_scheduler import CopySchedulerClient, PartitionAssignment
from remotelog.client.remote_fetch import FetchPartition, RemoteFetchClient
from remotelog.core.errors import (
    OffsetOutOfRangeError,
    RemoteLogError,
    RemoteResourceNotFoundError,
    ServiceUnavailableError,
)
from remotelog.core.list_offsets import EARLIEST_TIMESTAMP
from remotelog.core.model import RemoteLogSegmentMetadata, TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.partition_log import LogConfig, PartitionLog
from remotelog.dev.stack import SERVICES, DevStack
from remotelog.kafka.records import Record, decode_records, iter_batches
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.startup import open_metadata_manager
from remotelog.remover.config import ScrubConfig

TOPIC = "chaos"
LEADER_EPOCH = 0
FETCH_MAX_BYTES = 64 * 1024
# How long one read keeps retrying through restarts before it is a failure.
READ_PATIENCE_S = 60.0
SETTLE_TIMEOUT_S = 180.0
S3_FAULTS = ("503", "500", "drop")
COPIED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
OPTIONS = ClientOptions(timeout_s=20)


@dataclass(frozen=True)
class SoakConfig:
    seconds: float
    partitions: int = 20
    seed: int = 405
    kill_every_s: tuple[float, float] = (2.0, 4.0)
    segment_bytes: int = 16 * 1024
    batch_records: int = 16
    # About what the copy scheduler tiers under the killer here (3-4 segments a
    # second), so a long run does not build a backlog.
    write_every_s: float = 0.35
    readers: int = 4
    # Remote retention keeps about this many segments' bytes of each partition.
    retained_segments: int = 6

    @classmethod
    def for_seconds(cls, seconds: float) -> SoakConfig:
        """Segments grow with the run, so a partition rolls about a dozen whatever its
        length: the audit reads every tiered segment back and replays the whole
        metadata topic, which must stay within minutes."""
        return cls(seconds, segment_bytes=int(16 * 1024 * max(1.0, seconds / 40)))


@dataclass
class SoakReport:
    kills: Counter[str] = field(default_factory=Counter)
    s3_faults: int = 0
    records_written: int = 0
    records_verified: int = 0
    reads: int = 0
    reads_retried: int = 0
    reads_expired: int = 0
    reads_below_log_start: int = 0
    segments_rolled: int = 0
    segments_tiered: int = 0
    segments_verified: int = 0
    segments_lost: int = 0
    orphans_scrubbed: int = 0
    orphans_after_scrub: int = -1
    replay_matches: bool = False
    failures: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        kills = ", ".join(f"{name} {n}" for name, n in sorted(self.kills.items()))
        return [
            f"kills survived     {sum(self.kills.values())} ({kills})",
            f"S3 faults          {self.s3_faults} injections",
            f"records written    {self.records_written:,}",
            f"records verified   {self.records_verified:,} in {self.reads:,} random reads "
            f"({self.reads_retried:,} retried through a restart, {self.reads_expired} of "
            "them answered empty as the wait expired, "
            f"{self.reads_below_log_start} raced retention)",
            f"segments           {self.segments_rolled} rolled, {self.segments_tiered} tiered "
            f"and retained, {self.segments_verified} byte-identical",
            f"segments lost      {self.segments_lost}",
            f"orphans            {self.orphans_scrubbed} scrubbed, "
            f"{self.orphans_after_scrub} after the scrub",
            f"snapshot + tail    {'== full replay' if self.replay_matches else '!= full replay'}",
            *(f"FAILURE            {failure}" for failure in self.failures[:20]),
        ]


def value_of(partition: int, offset: int) -> bytes:
    digest = hashlib.blake2b(f"{partition}:{offset}".encode(), digest_size=16).digest()
    return digest * (1 + offset % 8)


def key_of(partition: int, offset: int) -> bytes:
    return f"k{partition}-{offset}".encode()


@dataclass(frozen=True)
class Rolled:
    base_offset: int
    end_offset: int
    shadow: Path  # a hard link to the segment's .log


class Writer:
    """The broker's appends: batches to every partition, segments rolled by size."""

    def __init__(self, data_dir: Path, config: SoakConfig) -> None:
        self.config = config
        self.topic_id = uuid.uuid4()
        self.shadow_dir = data_dir / "rolled"
        self.shadow_dir.mkdir(parents=True)
        self.base_timestamp = int(time.time() * 1000)
        log_config = LogConfig(segment_bytes=config.segment_bytes)
        self.logs = [
            PartitionLog.create(data_dir / "kafka-logs", TOPIC, p, self.topic_id, log_config)
            for p in range(config.partitions)
        ]
        self.tips = [TopicIdPartition(self.topic_id, TOPIC, p) for p in range(config.partitions)]
        self.rolled: list[dict[int, Rolled]] = [{} for _ in self.logs]
        self.records = 0

    def assignments(self) -> list[PartitionAssignment]:
        retention_bytes = self.config.retained_segments * self.config.segment_bytes
        return [
            PartitionAssignment(
                tip,
                log.directory,
                LEADER_EPOCH,
                retention_ms=-1,
                retention_bytes=retention_bytes,
                local_retention_ms=-1,
                local_retention_bytes=0,
            )
            for tip, log in zip(self.tips, self.logs, strict=True)
        ]

    def step(self) -> None:
        for partition, log in enumerate(self.logs):
            first = log.log_end_offset
            batch = [
                Record(
                    0,
                    self.base_timestamp + offset,
                    key_of(partition, offset),
                    value_of(partition, offset),
                    (),
                )
                for offset in range(first, first + self.config.batch_records)
            ]
            log.append(batch, leader_epoch=LEADER_EPOCH)
            self.records += len(batch)
            # Linked before the high watermark lets the scheduler tier (and delete) it.
            for segment, following in zip(log.segments, log.segments[1:], strict=False):
                if segment.base_offset not in self.rolled[partition]:
                    shadow = self.shadow_dir / f"{partition}-{segment.base_offset}.log"
                    os.link(segment.path(".log"), shadow)
                    self.rolled[partition][segment.base_offset] = Rolled(
                        segment.base_offset, following.base_offset - 1, shadow
                    )
            log.set_high_watermark(log.log_end_offset)


@dataclass
class Tiered:
    """What the scheduler last said of a partition: highest tiered offset, log start."""

    highest: int = -1
    log_start: int = 0


class Soak:
    def __init__(
        self,
        stack: DevStack,
        writer: Writer,
        redis: RedisServer,
        store_s3: S3Server,
        config: SoakConfig,
    ) -> None:
        self.stack, self.writer, self.redis, self.store_s3 = stack, writer, redis, store_s3
        self.config = config
        self.report = SoakReport()
        self.tiered = [Tiered() for _ in writer.tips]
        self.rng = random.Random(config.seed)
        self.stopping = asyncio.Event()
        self.first_round_done = asyncio.Event()

    async def run(self) -> SoakReport:
        addresses = self.stack.addresses
        async with (
            CopySchedulerClient(addresses["copy-scheduler"], options=OPTIONS) as scheduler,
            RemoteFetchClient(addresses["remote-fetch"], options=OPTIONS) as fetch,
        ):
            await scheduler.on_partition_leadership_changes(self.writer.assignments())
            tasks = [
                asyncio.create_task(self._write()),
                asyncio.create_task(self._watch(scheduler)),
                asyncio.create_task(self._kill(scheduler)),
                *(asyncio.create_task(self._read(fetch, n)) for n in range(self.config.readers)),
            ]
            try:
                await asyncio.sleep(self.config.seconds)
                # However slow the restarts, every part is killed at least once.
                await self.first_round_done.wait()
            finally:
                self.stopping.set()
                await asyncio.gather(*tasks)
            self.store_s3.clear_faults()
            await self._settle(scheduler)
        await self._audit()
        self.report.records_written = self.writer.records
        self.report.segments_rolled = sum(len(r) for r in self.writer.rolled)
        return self.report

    # -- the load ----------------------------------------------------------------

    async def _write(self) -> None:
        while not self.stopping.is_set():
            await asyncio.to_thread(self.writer.step)
            await self._pause(self.config.write_every_s)

    async def _watch(self, scheduler: CopySchedulerClient) -> None:
        """The scheduler's word on each partition: what is acknowledged as tiered."""

        async def learn(tip: TopicIdPartition, tiered: Tiered) -> None:
            with contextlib.suppress(RemoteLogError):
                state = await scheduler.partition_state(tip, timeout_s=2)
                tiered.highest = max(tiered.highest, state.highest_tiered_offset)
                tiered.log_start = max(tiered.log_start, state.log_start_offset)

        while not self.stopping.is_set():
            # All at once: in sequence, a scheduler down for its restart held the
            # harness's log starts stale for 20 timeouts.
            await asyncio.gather(
                *(learn(tip, t) for tip, t in zip(self.writer.tips, self.tiered, strict=True))
            )
            await self._pause(0.5)

    async def _read(self, fetch: RemoteFetchClient, number: int) -> None:
        rng = random.Random(self.config.seed + number)
        while not self.stopping.is_set():
            partition = rng.randrange(len(self.writer.tips))
            tiered = self.tiered[partition]
            if tiered.highest < tiered.log_start:
                await self._pause(0.1)
                continue
            offset = rng.randint(tiered.log_start, tiered.highest)
            await self._read_and_check(fetch, partition, offset)

    async def _read_and_check(self, fetch: RemoteFetchClient, partition: int, offset: int) -> None:
        """Fetch `offset` as a broker would, through restarts, and check every record."""
        tip = self.writer.tips[partition]
        self.report.reads += 1
        deadline = time.monotonic() + READ_PATIENCE_S
        while True:
            try:
                (answer,) = await fetch.fetch(
                    [FetchPartition(tip, offset, FETCH_MAX_BYTES, LEADER_EPOCH)]
                )
                error = answer.error
            except RemoteLogError as exc:
                error = exc
            if error is None and answer.records:
                self._check(partition, offset, bytes(answer.records))
                return
            if error is None:
                # The wait expired before the remote read finished (a restart, an S3
                # fault): Kafka answers empty records and the consumer fetches again.
                self.report.reads_expired += 1
                error = ServiceUnavailableError("the remote read did not finish in time")
            out_of_range = isinstance(error, OffsetOutOfRangeError)
            if out_of_range and await self._below_log_start(fetch, partition, offset):
                self.report.reads_below_log_start += 1
                return  # retention deleted it after it was chosen
            if not (error.retriable or out_of_range):
                self._fail(f"{TOPIC}-{partition} Fetch at {offset}: {error!r}")
                return
            if time.monotonic() > deadline:
                self._fail(
                    f"{TOPIC}-{partition} Fetch at {offset} still failed after "
                    f"{READ_PATIENCE_S:.0f} s: {error!r}"
                )
                return
            self.report.reads_retried += 1
            await asyncio.sleep(0.2)

    async def _below_log_start(self, fetch: RemoteFetchClient, partition: int, offset: int) -> bool:
        """What a consumer does on OFFSET_OUT_OF_RANGE: ask the earliest remote offset."""
        tiered = self.tiered[partition]
        with contextlib.suppress(RemoteLogError):
            earliest = await fetch.list_offsets(
                self.writer.tips[partition], EARLIEST_TIMESTAMP, timeout_s=2
            )
            if earliest is not None:
                tiered.log_start = max(tiered.log_start, earliest.offset)
        return offset < tiered.log_start

    def _check(self, partition: int, offset: int, records: bytes) -> None:
        where = f"{TOPIC}-{partition} Fetch at {offset}"
        headers = list(iter_batches(records))
        if not headers or not headers[0].base_offset <= offset <= headers[0].last_offset:
            held = [(h.base_offset, h.last_offset) for h in headers[:3]]
            tiered = self.tiered[partition]
            self._fail(
                f"{where}: the first batch does not hold the offset: {len(records)} bytes, "
                f"batches {held}; tiered {tiered.log_start}-{tiered.highest}"
            )
            return
        for header in headers:
            for record in decode_records(records, header, source=where):
                want = (
                    self.writer.base_timestamp + record.offset,
                    key_of(partition, record.offset),
                    value_of(partition, record.offset),
                )
                if (record.timestamp, record.key, record.value) != want:
                    self._fail(f"{where}: record {record.offset} differs from what was written")
                    return
                self.report.records_verified += 1

    async def _kill(self, scheduler: CopySchedulerClient) -> None:
        """Each victim in turn (the order shuffled every round), SIGKILLed and restarted."""
        victims: list[str] = []
        try:
            while not self.stopping.is_set():
                await self._pause(self.rng.uniform(*self.config.kill_every_s))
                if self.stopping.is_set():
                    return
                if not victims:
                    victims = [*SERVICES, "kafka", "redis"]
                    self.rng.shuffle(victims)
                await self._kill_one(victims.pop(), scheduler)
                if not victims:
                    self.first_round_done.set()
        finally:
            self.first_round_done.set()  # a failed killer must not leave run() waiting

    async def _kill_one(self, victim: str, scheduler: CopySchedulerClient) -> None:
        if victim == "redis":
            self.redis.kill()
            self.redis.start()
        else:
            await asyncio.to_thread(self.stack.restart, victim, crash=True)
        if victim == "copy-scheduler":
            # A restarted scheduler knows no partition until the broker says again.
            await scheduler.on_partition_leadership_changes(self.writer.assignments())
        self.report.kills[victim] += 1
        fault = self.rng.choice(S3_FAULTS)
        self.store_s3.inject(mode=fault, count=self.rng.randint(1, 3))
        self.report.s3_faults += 1

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    def _fail(self, failure: str) -> None:
        self.report.failures.append(failure)

    # -- the audit ---------------------------------------------------------------

    async def _settle(self, scheduler: CopySchedulerClient) -> None:
        """Until every rolled segment is tiered (the writer has stopped)."""
        ends = [
            max((r.end_offset for r in rolled.values()), default=-1)
            for rolled in self.writer.rolled
        ]
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        for tip, end in zip(self.writer.tips, ends, strict=True):
            while True:
                with contextlib.suppress(RemoteLogError):
                    state = await scheduler.partition_state(tip, timeout_s=10)
                    if state.highest_tiered_offset >= end and state.copy_lag_segments == 0:
                        break
                if time.monotonic() > deadline:
                    self._fail(f"{tip.topic}-{tip.partition}: rolled up to {end}, not all tiered")
                    break
                await asyncio.sleep(0.2)

    async def _audit(self) -> None:
        addresses = self.stack.addresses
        async with (
            MetadataClient(addresses["metadata-manager"], options=OPTIONS) as metadata,
            SegmentStoreClient(addresses["segment-store"], options=OPTIONS) as store,
        ):
            for partition, tip in enumerate(self.writer.tips):
                listed = [s async for s in metadata.list_remote_log_segments(tip)]
                copied = sorted(
                    (s for s in listed if s.state is COPIED), key=lambda s: s.start_offset
                )
                self._check_range(partition, copied)
                for segment in copied:
                    await self._check_bytes(store, partition, segment)
        await self._scrub()
        await self._check_replay()
        self._check_logs()

    def _check_logs(self) -> None:
        """No service met an error it did not expect: every traceback in a log fails."""
        for child in self.stack.children:
            if child.process is None:
                continue  # the broker's log is Kafka's own (a JVM's, no Python tracebacks)
            lines = child.log.read_text(errors="replace").splitlines()
            for number, line in enumerate(lines):
                if line.startswith("Traceback (most recent call last)"):
                    last = next((x for x in lines[number + 1 :] if x and not x[0].isspace()), "?")
                    self._fail(f"{child.name} logged a traceback: {last}")

    def _check_range(self, partition: int, copied: list[RemoteLogSegmentMetadata]) -> None:
        """No gap in the tiered range; everything acknowledged (and not expired) is there."""
        where = f"{TOPIC}-{partition}"
        self.report.segments_tiered += len(copied)
        for before, after in itertools.pairwise(copied):
            if after.start_offset != before.end_offset + 1:
                self._fail(f"{where}: gap between {before.end_offset} and {after.start_offset}")
        held = {(s.start_offset, s.end_offset) for s in copied}
        log_start = copied[0].start_offset if copied else 0
        acknowledged = self.tiered[partition].highest
        for rolled in self.writer.rolled[partition].values():
            covered = log_start <= rolled.base_offset and rolled.end_offset <= acknowledged
            if covered and (rolled.base_offset, rolled.end_offset) not in held:
                self.report.segments_lost += 1
                self._fail(f"{where}: segment {rolled.base_offset}-{rolled.end_offset} lost")
        # What retention kept: about retention.bytes, so nothing vanished from the bottom.
        retained = sum(s.segment_size_in_bytes for s in copied)
        written = sum(r.shadow.stat().st_size for r in self.writer.rolled[partition].values())
        floor = (self.config.retained_segments - 3) * self.config.segment_bytes
        if written > floor and retained < floor:
            self._fail(f"{where}: {retained} bytes retained, retention keeps about {floor}")

    async def _check_bytes(
        self, store: SegmentStoreClient, partition: int, segment: RemoteLogSegmentMetadata
    ) -> None:
        rolled = self.writer.rolled[partition].get(segment.start_offset)
        where = f"{TOPIC}-{partition} segment {segment.start_offset}-{segment.end_offset}"
        if rolled is None or rolled.end_offset != segment.end_offset:
            self._fail(f"{where}: no such segment was rolled")
            return
        try:
            chunks = [bytes(c) async for c in store.fetch_log_segment(segment, 0)]
        except RemoteResourceNotFoundError:
            # Retention may delete a segment between the listing and its read: that one
            # is now being deleted, not lost. Still listed as copied, it is lost.
            if await self._still_copied(segment):
                self._fail(f"{where}: listed as copied, but its objects are gone")
            return
        if b"".join(chunks) != rolled.shadow.read_bytes():
            self._fail(f"{where}: the stored bytes differ from the rolled segment's")
            return
        self.report.segments_verified += 1

    async def _still_copied(self, segment: RemoteLogSegmentMetadata) -> bool:
        address = self.stack.addresses["metadata-manager"]
        tip = segment.remote_log_segment_id.topic_id_partition
        async with MetadataClient(address, options=OPTIONS) as metadata:
            listed = [s async for s in metadata.list_remote_log_segments(tip)]
        return any(
            s.remote_log_segment_id == segment.remote_log_segment_id and s.state is COPIED
            for s in listed
        )

    async def _scrub(self) -> None:
        """A scrub deletes what no metadata references; a second finds nothing."""
        segment_store = self.stack.config.overrides["segment-store"]
        properties = {
            **{k: v for k, v in segment_store.items() if k.startswith("storage.")},
            "metadata.manager.address": self.stack.addresses["metadata-manager"],
        }
        path = self.stack.data_dir / "config" / "scrub.properties"
        config = load_properties(ScrubConfig, path, properties)
        lines: list[str] = []
        first = await run_scrub(config, older_than_s=0, delete=True, out=lines.append)
        self.report.orphans_scrubbed = len(first.orphans) + len(first.uploads)
        second = await run_scrub(config, older_than_s=0, delete=False, out=lines.append)
        self.report.orphans_after_scrub = len(second.orphans) + len(second.uploads)

    async def _check_replay(self) -> None:
        """The metadata manager killed and restarted (its last snapshot, then the topic's
        tail) answers every partition exactly as a new instance replaying the topic."""
        restarted = await asyncio.to_thread(self.stack.restart, "metadata-manager", crash=True)
        log = restarted.log.read_text(errors="replace")
        last_start = log.rsplit("starting metadata-manager", 1)[-1]
        if "loaded metadata snapshot" not in last_start:
            self._fail("the restarted metadata manager loaded no snapshot")
        assert restarted.config is not None
        served_with = dict(
            line.split("=", 1) for line in restarted.config.read_text().splitlines() if "=" in line
        )
        properties = {
            **served_with,
            "listen.address": "127.0.0.1:0",
            "remote.log.metadata.snapshot.dir": str(self.stack.data_dir / "replay-snapshots"),
        }
        path = self.stack.data_dir / "config" / "replay.properties"
        config = load_properties(MetadataManagerConfig, path, properties)
        replay = await open_metadata_manager(config)
        try:
            await replay.on_partition_leadership_changes(self.writer.tips, [])
            async with MetadataClient(restarted.address, options=OPTIONS) as metadata:
                matches = True
                for tip in self.writer.tips:
                    await eventually(
                        lambda tip=tip: replay.store.is_ready(tip),
                        timeout_s=60 + self.config.seconds,
                        why=lambda: loading_state(replay, self.stack.broker),
                    )
                    served = [s async for s in metadata.list_remote_log_segments(tip)]
                    if served != replay.remote_log_segments(tip):
                        matches = False
                        self._fail(f"{tip.topic}-{tip.partition}: snapshot + tail != replay")
                self.report.replay_matches = matches
        finally:
            await replay.close()
