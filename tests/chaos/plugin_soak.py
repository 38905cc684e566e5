"""The chaos soak in the default mode: Apache Kafka tiers through the remotelog plugin.

An idempotent producer writes to a tiered topic (1 MiB segments, one second of local
retention) while a killer, at random, SIGKILLs the segment store, the metadata manager
or the broker (each restarted where it was) or SIGSTOPs one of them for a few seconds,
hung with its connections open. Readers consume through Kafka from offset 0 or from a
random acknowledged offset at random moments: every record's value names its partition
and sequence number and carries a digest of them, so a record is checked without
keeping what was written, and an acknowledged offset must hold what was acknowledged.

Then the audit: every acknowledged record is read back through Kafka at its offset,
once; each partition's tiered segments are contiguous from offset 0 and none is tiered
twice; Kafka's ListOffsets -2 and -5 agree with the metadata manager; a scrub finds no
orphan in the store.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from support.kafka_admin import create_topic
from support.services import load_properties
from support.topics import read_to_end

from remotelog.cli.scrub import run_scrub
from remotelog.client import ClientOptions, MetadataClient
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.stack import DevStack
from remotelog.remover.config import ScrubConfig
from remotelog.segmentstore.layout import parse_segment_key

TOPIC = "chaos-plugin"
VICTIMS = ("segment-store", "metadata-manager", "kafka")
SEGMENT_BYTES = 1024 * 1024  # Kafka's floor for segment.bytes
RECORD_BYTES = 1024
# How long one read keeps trying through restarts and stops before it is a failure.
READ_PATIENCE_S = 120.0
SETTLE_TIMEOUT_S = 300.0
OPTIONS = ClientOptions(timeout_s=20)


@dataclass(frozen=True)
class PluginSoakConfig:
    seconds: float
    partitions: int = 3
    seed: int = 63
    fault_every_s: tuple[float, float] = (4.0, 8.0)
    stopped_for_s: tuple[float, float] = (1.0, 5.0)
    # About 1 MB/s a partition: a segment rolls and tiers every second or so.
    records_per_second: int = 3000


@dataclass
class PluginSoakReport:
    faults: Counter[str] = field(default_factory=Counter)
    records_acknowledged: int = 0
    # Checked by the readers while the faults went on, and read back by the audit.
    records_checked: int = 0
    records_audited: int = 0
    reads: int = 0
    segments_tiered: int = 0
    # Finished copies of a range already finished: Kafka copies a segment again when the
    # answer to its COPY_SEGMENT_FINISHED update is lost (the metadata manager killed or
    # stopped after writing it), and the older copy is unreferenced, left to retention.
    segments_copied_again: int = 0
    # Incomplete uploads of copies cut off whose cleanup failed (the store down): Kafka
    # marked them DELETE_SEGMENT_STARTED and retries the delete only once retention
    # reaches them, never with retention.ms=-1. Issue 75 has who should own them sooner.
    uploads_kafka_deletes: int = 0
    failures: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        faults = ", ".join(f"{name} {n}" for name, n in sorted(self.faults.items()))
        return [
            f"faults survived    {sum(self.faults.values())} ({faults})",
            f"records            {self.records_acknowledged:,} acknowledged, "
            f"{self.records_checked:,} checked in {self.reads:,} reads through Kafka "
            f"during the faults, {self.records_audited:,} read back after",
            f"segments           {self.segments_tiered} tiered, no gap, "
            f"{self.segments_copied_again} copied again after a lost answer",
            f"uploads left       {self.uploads_kafka_deletes}, each of a copy Kafka is deleting",
            *(f"FAILURE            {failure}" for failure in self.failures[:20]),
        ]


def value_of(partition: int, sequence: int) -> bytes:
    head = f"{partition}:{sequence}:".encode()
    digest = hashlib.blake2b(head, digest_size=32).digest()
    return head + (digest * (RECORD_BYTES // 32 + 1))[: RECORD_BYTES - len(head)]


def sequence_of(partition: int, value: bytes) -> int | None:
    """The sequence number a value carries, or None if it is not one this soak wrote."""
    try:
        named, sequence, _ = value.split(b":", 2)
        number = int(sequence)
    except ValueError:
        return None
    if int(named) != partition or value != value_of(partition, number):
        return None
    return number


class Acknowledged:
    """What the broker acknowledged: offset -> sequence number, by partition."""

    def __init__(self, partitions: int) -> None:
        self.lock = threading.Lock()
        self.offsets: list[dict[int, int]] = [{} for _ in range(partitions)]

    def add(self, partition: int, offset: int, sequence: int) -> None:
        with self.lock:
            self.offsets[partition][offset] = sequence

    def sample(self, rng: random.Random, partition: int) -> int | None:
        with self.lock:
            offsets = self.offsets[partition]
            return rng.choice(list(offsets)) if offsets else None

    def sequence_at(self, partition: int, offset: int) -> int | None:
        with self.lock:
            return self.offsets[partition].get(offset)

    def count(self) -> int:
        with self.lock:
            return sum(len(o) for o in self.offsets)


class PluginSoak:
    def __init__(self, stack: DevStack, config: PluginSoakConfig) -> None:
        self.stack, self.config = stack, config
        self.bootstrap = stack.broker.bootstrap_servers
        self.report = PluginSoakReport()
        self.acknowledged = Acknowledged(config.partitions)
        self.rng = random.Random(config.seed)
        self.stopping = threading.Event()
        self.failures_lock = threading.Lock()
        self.topic_id = uuid.UUID(int=0)

    def _fail(self, failure: str) -> None:
        with self.failures_lock:
            self.report.failures.append(failure)

    async def run(self) -> PluginSoakReport:
        settings = {
            "remote.storage.enable": "true",
            "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.ms": "1000",
            "retention.ms": "-1",
        }
        self.topic_id = await asyncio.to_thread(
            create_topic,
            self.bootstrap,
            TOPIC,
            partitions=self.config.partitions,
            config=settings,
        )
        workers = [
            threading.Thread(target=self._produce, name="producer"),
            *(threading.Thread(target=self._read, args=(n,), name=f"reader-{n}") for n in range(2)),
        ]
        for worker in workers:
            worker.start()
        try:
            await self._inject_faults()
        finally:
            self.stopping.set()
            for worker in workers:
                await asyncio.to_thread(worker.join)
        self.report.records_acknowledged = self.acknowledged.count()
        await self._settle()
        await self._audit()
        return self.report

    # -- the load ----------------------------------------------------------------

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 20,
                # Through every restart: a record is acknowledged or never counted.
                "delivery.timeout.ms": 600_000,
            }
        )
        sequences = [itertools.count() for _ in range(self.config.partitions)]
        batch = max(1, self.config.records_per_second // 20)

        def delivered(error, message) -> None:
            if error is None:
                sequence = sequence_of(message.partition(), message.value())
                assert sequence is not None
                self.acknowledged.add(message.partition(), message.offset(), sequence)

        while not self.stopping.is_set():
            began = time.monotonic()
            for _ in range(batch):
                for partition in range(self.config.partitions):
                    value = value_of(partition, next(sequences[partition]))
                    while True:
                        try:
                            producer.produce(
                                TOPIC, value, partition=partition, on_delivery=delivered
                            )
                            break
                        except BufferError:
                            producer.poll(0.1)
            producer.poll(0)
            time.sleep(max(0.0, 0.05 - (time.monotonic() - began)))
        if producer.flush(600) != 0:
            self._fail("the producer could not deliver what it had sent")

    def _read(self, number: int) -> None:
        """At random moments, a partition read through Kafka, every record checked."""
        rng = random.Random(self.config.seed + number)
        while not self.stopping.wait(rng.uniform(0.5, 3.0)):
            partition = rng.randrange(self.config.partitions)
            start = 0 if rng.random() < 0.3 else self.acknowledged.sample(rng, partition)
            if start is None:
                continue
            self._read_and_check(partition, start, records=2000)

    def _read_and_check(self, partition: int, start: int, records: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"chaos-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        consumer.assign([TopicPartition(TOPIC, partition, start)])
        self.report.reads += 1
        deadline = time.monotonic() + READ_PATIENCE_S
        expected = start
        try:
            while expected < start + records and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return
                    continue  # retriable: a restart, a hung service
                if message.offset() != expected and expected == start:
                    self._fail(
                        f"{TOPIC}-{partition}: a read from {start} began at {message.offset()}"
                    )
                    return
                self._check(partition, message.offset(), message.value())
                expected = message.offset() + 1
            if expected == start:
                self._fail(
                    f"{TOPIC}-{partition}: nothing read from {start} in {READ_PATIENCE_S:.0f} s"
                )
        finally:
            consumer.close()

    def _check(self, partition: int, offset: int, value: bytes | None) -> None:
        where = f"{TOPIC}-{partition} offset {offset}"
        sequence = sequence_of(partition, value or b"")
        if sequence is None:
            self._fail(f"{where}: a record this soak did not write")
            return
        acknowledged = self.acknowledged.sequence_at(partition, offset)
        if acknowledged is not None and acknowledged != sequence:
            self._fail(f"{where}: holds {sequence}, {acknowledged} was acknowledged there")
            return
        self.report.records_checked += 1

    # -- the faults --------------------------------------------------------------

    async def _inject_faults(self) -> None:
        """Until the time is up and every victim has been killed and hung once."""
        deadline = time.monotonic() + self.config.seconds
        pending = {(victim, fault) for victim in VICTIMS for fault in ("kill", "stop")}
        while time.monotonic() < deadline or pending:
            await asyncio.sleep(self.rng.uniform(*self.config.fault_every_s))
            victim, fault = (
                self.rng.choice(sorted(pending))
                if pending and time.monotonic() >= deadline
                else (self.rng.choice(VICTIMS), self.rng.choice(("kill", "stop")))
            )
            pending.discard((victim, fault))
            if fault == "kill":
                await asyncio.to_thread(self.stack.restart, victim, crash=True)
            else:
                await self._hang(victim, self.rng.uniform(*self.config.stopped_for_s))
            self.report.faults[f"{victim} {fault}"] += 1

    async def _hang(self, victim: str, seconds: float) -> None:
        child = next(c for c in self.stack.children if c.name == victim)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            os.kill(child.pid, signal.SIGCONT)

    # -- the audit ---------------------------------------------------------------

    def _tips(self) -> list[TopicIdPartition]:
        return [TopicIdPartition(self.topic_id, TOPIC, p) for p in range(self.config.partitions)]

    async def _finished(self, metadata: MetadataClient, tip: TopicIdPartition) -> list:
        listed = [s async for s in metadata.list_remote_log_segments(tip)]
        finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        return sorted((s for s in listed if s.state is finished), key=lambda s: s.start_offset)

    async def _settle(self) -> None:
        """Until Kafka has tiered every rolled segment and freed its disk of them: its
        earliest local offset (ListOffsets -4) is one past the last tiered (-5)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            local = await asyncio.to_thread(self.stack.broker.list_offsets, TOPIC, "earliest-local")
            tiered = await asyncio.to_thread(self.stack.broker.list_offsets, TOPIC, "latest-tiered")
            if all(
                local.get(p, -1) == tiered.get(p, -2) + 1 > 0 for p in range(self.config.partitions)
            ):
                return
            if time.monotonic() > deadline:
                self._fail(f"not settled: earliest local {local}, latest tiered {tiered}")
                return
            await asyncio.sleep(1)

    async def _audit(self) -> None:
        for partition in range(self.config.partitions):
            messages = await asyncio.to_thread(read_to_end, self.bootstrap, TOPIC, partition)
            read = {m.offset(): sequence_of(partition, m.value() or b"") for m in messages}
            sequences = [s for s in read.values() if s is not None]
            if len(sequences) != len(read) or sequences != sorted(set(sequences)):
                self._fail(f"{TOPIC}-{partition}: records out of order or written twice")
            for offset, sequence in self.acknowledged.offsets[partition].items():
                if read.get(offset) != sequence:
                    self._fail(f"{TOPIC}-{partition}: acknowledged offset {offset} lost")
                    break
            self.report.records_audited += len(read)
        earliest = await asyncio.to_thread(self.stack.broker.list_offsets, TOPIC, "earliest")
        tiered = await asyncio.to_thread(self.stack.broker.list_offsets, TOPIC, "latest-tiered")
        async with MetadataClient(
            self.stack.addresses["metadata-manager"], options=OPTIONS
        ) as metadata:
            for tip in self._tips():
                where = f"{TOPIC}-{tip.partition}"
                finished = await self._finished(metadata, tip)
                ranges = sorted({(s.start_offset, s.end_offset) for s in finished})
                self.report.segments_tiered += len(ranges)
                self.report.segments_copied_again += len(finished) - len(ranges)
                if not ranges or ranges[0][0] != 0 or earliest[tip.partition] != 0:
                    self._fail(f"{where}: the tier does not start at offset 0")
                for (_, before_end), (after_start, _) in itertools.pairwise(ranges):
                    if after_start != before_end + 1:
                        self._fail(f"{where}: {before_end} then {after_start}")
                if finished and tiered[tip.partition] != finished[-1].end_offset:
                    self._fail(
                        f"{where}: Kafka's latest tiered {tiered[tip.partition]}, the metadata "
                        f"manager's {finished[-1].end_offset}"
                    )
        await self._scrub()

    async def _scrub(self) -> None:
        properties = {
            "storage.backend": "filesystem",
            "storage.root": str(self.stack.segments_dir),
            "metadata.manager.address": self.stack.addresses["metadata-manager"],
        }
        path = self.stack.data_dir / "config" / "scrub.properties"
        config = load_properties(ScrubConfig, path, properties)
        lines: list[str] = []
        found = await run_scrub(config, older_than_s=0, delete=False, out=lines.append)
        being_deleted = await self._being_deleted()
        of_deletes = [
            upload
            for upload in found.uploads
            if (parsed := parse_segment_key("", upload.key)) is not None
            and parsed.segment_id in being_deleted
        ]
        self.report.uploads_kafka_deletes = len(of_deletes)
        others = len(found.uploads) - len(of_deletes)
        if found.orphans or others:
            self._fail(f"scrub: {len(found.orphans)} orphans, {others} uploads")

    async def _being_deleted(self) -> set[uuid.UUID]:
        """The ids of the segments Kafka has marked DELETE_SEGMENT_STARTED."""
        deleting = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
        async with MetadataClient(
            self.stack.addresses["metadata-manager"], options=OPTIONS
        ) as metadata:
            return {
                s.remote_log_segment_id.id
                for tip in self._tips()
                async for s in metadata.list_remote_log_segments(tip)
                if s.state is deleting
            }
