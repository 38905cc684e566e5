"""The chaos soak in the default mode: Apache Kafka tiers through the remotelog plugin,
as the deployments run it: the store on S3 (moto behind object storage's link, which
answers some requests SlowDown and cuts some GETs off), the broker PUTting segments by
the URLs the store signs and reading them back by URL with read-ahead.

An idempotent producer writes to a tiered topic (1 MiB segments, one second of local
retention) while a killer, at random, SIGKILLs the segment store, the metadata manager
or the broker (each restarted where it was) or SIGSTOPs one of them, hung with its
connections open, mostly for longer than the plugin's read and copy deadlines. Readers
consume through Kafka from offset 0 or from a random acknowledged offset at random
moments: every record's value names its partition and sequence number and carries a
digest of them, so a record is checked without keeping what was written, and an
acknowledged offset must hold what was acknowledged.

Then the audit: every acknowledged record is read back through Kafka at its offset,
once; each partition's tiered segments are contiguous from offset 0 and none is tiered
twice; Kafka's ListOffsets -2 and -5 agree with the metadata manager; every copy went
by URL; and, once the store has swept what the cut-off copies left, a scrub finds no
orphan and no incomplete upload.
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
from support.servers import S3Server
from support.services import load_properties
from support.topics import read_to_end
from support.waiting import eventually

from remotelog.cli.scrub import run_scrub
from remotelog.client import ClientOptions, MetadataClient
from remotelog.core.model import TopicIdPartition
from remotelog.core.states import RemoteLogSegmentState
from remotelog.dev.stack import DevConfig, DevStack
from remotelog.remover.config import ScrubConfig

TOPIC = "chaos-plugin"
VICTIMS = ("segment-store", "metadata-manager", "kafka")
SEGMENT_BYTES = 1024 * 1024  # Kafka's floor for segment.bytes
RECORD_BYTES = 1024
# How long one read keeps trying through restarts and stops before it is a failure.
READ_PATIENCE_S = 120.0
SETTLE_TIMEOUT_S = 300.0
OPTIONS = ClientOptions(timeout_s=20)
# A region's S3, near enough, under load: 3% of requests SlowDown, 3% of GETs cut off.
S3_LINK = {"first_byte_ms": 20, "bandwidth_mb_s": 100}
S3_FAULTS = {"slow_down_fraction": 0.03, "cut_fraction": 0.03, "seed": 75}
# The plugin's deadlines, short, so that the hangs outlast them: a read's (a third of it
# silent and a GET is asked again), a copy's, and the age at which the store aborts an
# upload as abandoned (above the copy's, as it must be).
READ_DEADLINE_MS = 4_000
COPY_DEADLINE_MS = 8_000
ABORT_UPLOADS_AFTER_MS = 10_000
# How long the audit waits for the store's sweeps to abort what cut-off copies left.
SWEPT_WITHIN_S = 2 * ABORT_UPLOADS_AFTER_MS / 1000 + 10
BY_URL = "to the segment store by url"
_COUNTS = ("requests", "slowed_down", "cut")


def plugin_soak_stack(data_dir, s3_endpoint: str, bucket: str) -> DevConfig:
    """The stack the soak runs: the store on S3 at `bucket`, the broker copying and
    reading by URL with read-ahead, its deadlines short."""
    storage = {
        "storage.backend": "s3",
        "storage.s3.bucket.name": bucket,
        "storage.s3.endpoint.url": s3_endpoint,
        "storage.s3.path.style.access.enabled": "true",
        "storage.aws.access.key.id": "test",
        "storage.aws.secret.access.key": "test",
    }
    plugin = {
        "copy.method": "url",
        "fetch.urls.enabled": "true",
        # Eight chunks to a segment, so each fetch reads into chunks asked for ahead.
        "fetch.read.ahead.chunk.bytes": str(128 << 10),
        "client.timeout.ms": str(READ_DEADLINE_MS),
        "client.copy.timeout.ms": str(COPY_DEADLINE_MS),
    }
    overrides = {
        "segment-store": {
            **storage,
            "incomplete.uploads.abort.after.ms": str(ABORT_UPLOADS_AFTER_MS),
        },
        "kafka": {f"rsm.config.{key}": value for key, value in plugin.items()},
    }
    return DevConfig(data_dir, broker="kafka", mode="plugin", overrides=overrides)


@dataclass(frozen=True)
class PluginSoakConfig:
    seconds: float
    partitions: int = 3
    seed: int = 63
    fault_every_s: tuple[float, float] = (4.0, 8.0)
    # Mostly past the read deadline (4 s), often past the copy's (8 s).
    stopped_for_s: tuple[float, float] = (1.0, 12.0)
    # A partition's: 1 MB/s, so a segment rolls and tiers about every second. (At 3 MB/s
    # a partition, tiering into moto on two cores falls minutes behind in 600 s.)
    records_per_second: int = 1000


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
    # What object storage's link did: requests, SlowDowns, GETs cut off midway.
    s3: dict[str, int] = field(default_factory=dict)
    copies_by_url: int = 0
    copies_otherwise: int = 0
    # Uploads of cut-off copies the store's sweeps aborted (its log says each), and those
    # the first scrub after the settle still found (the sweeps must abort them too).
    uploads_aborted: int = 0
    uploads_found: int = 0
    # Seconds of faults, of the settle, of the audit.
    phases_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
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
            f"copies             {self.copies_by_url} by url, {self.copies_otherwise} otherwise",
            f"S3                 {self.s3.get('requests', 0):,} requests, "
            f"{self.s3.get('slowed_down', 0)} SlowDown, {self.s3.get('cut', 0)} GETs cut off",
            f"uploads            {self.uploads_aborted} left by cut-off copies aborted by the "
            f"store, {self.uploads_found} more found after the settle",
            "took               {:.0f} s of faults, {:.0f} s to settle, {:.0f} s to audit".format(
                *self.phases_s
            ),
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
    def __init__(self, stack: DevStack, s3: S3Server, config: PluginSoakConfig) -> None:
        self.stack, self.s3, self.config = stack, s3, config
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
        self.s3.link("POST", **S3_LINK, **S3_FAULTS)
        started = time.monotonic()
        for worker in workers:
            worker.start()
        try:
            await self._inject_faults()
        finally:
            self.stopping.set()
            for worker in workers:
                await asyncio.to_thread(worker.join)
        self.report.records_acknowledged = self.acknowledged.count()
        began = time.monotonic()
        await self._settle()
        self.report.s3 = {k: int(v) for k, v in (self.s3.link() or {}).items() if k in _COUNTS}
        settled = time.monotonic()
        await self._audit()
        self.report.phases_s = (began - started, settled - began, time.monotonic() - settled)
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

    def _count_copies(self) -> None:
        """Kafka's "Copied segment" lines of every run: each must say it went by URL."""
        assert self.stack.broker.log_path is not None
        log = self.stack.broker.log_path.read_text(errors="replace").splitlines()
        copies = [line for line in log if "Copied segment" in line and TOPIC in line]
        self.report.copies_by_url = sum(BY_URL in line for line in copies)
        self.report.copies_otherwise = len(copies) - self.report.copies_by_url
        if self.report.copies_otherwise:
            self._fail(f"{self.report.copies_otherwise} copies not by url")

    async def _scrub(self) -> None:
        """Once the store has swept the uploads cut-off copies left (within two of its
        abort ages), nothing in the bucket is unaccounted for."""
        self._count_copies()
        storage = self.stack.config.overrides["segment-store"]
        properties = {
            **{k: v for k, v in storage.items() if k.startswith("storage.")},
            "metadata.manager.address": self.stack.addresses["metadata-manager"],
        }
        path = self.stack.data_dir / "config" / "scrub.properties"
        config = load_properties(ScrubConfig, path, properties)
        found = []

        async def clean() -> bool:
            report = await run_scrub(config, older_than_s=0, delete=False, out=lambda _: None)
            found.append(report)
            return not report.orphans and not report.uploads

        try:
            await eventually(clean, timeout_s=SWEPT_WITHIN_S, interval_s=1.0)
        except AssertionError:
            last = found[-1]
            self._fail(f"scrub: {len(last.orphans)} orphans, {len(last.uploads)} uploads left")
        self.report.uploads_found = len(found[0].uploads)
        store_log = self.stack.data_dir / "logs" / "segment-store.log"
        self.report.uploads_aborted = store_log.read_text(errors="replace").count(
            "aborted the upload of"
        )
