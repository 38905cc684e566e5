"""Discovery: a sidecar scheduler follows its broker by itself.

Every interval it lists the broker's partition directories, asks the cluster
which partitions the broker leads and follows and how each topic is
configured, and hands the scheduler what changed, as a broker plugin would
with OnPartitionLeadershipChanges and StopPartitions. A topic id with remote
data that the cluster no longer has is handed to the partition remover, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from remotelog.coordination.lease import Leases, held
from remotelog.core import metrics as m
from remotelog.core.errors import KafkaUnavailableError, MetadataNotReadyError, RemoteLogError
from remotelog.core.model import TopicIdPartition
from remotelog.core.ports import RemotePartitionLister
from remotelog.core.tasks import cancel_and_wait
from remotelog.kafka.state_files import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    CorruptStateFileError,
    parse_leader_epoch_checkpoint,
    parse_partition_metadata,
)
from remotelog.scheduler.cluster import ClusterAccessDeniedError, ClusterView, TopicView
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.scheduler.partition import Assignment, Role
from remotelog.scheduler.scheduler import CopyScheduler

log = logging.getLogger(__name__)

# Kafka names a partition's directory <topic>-<partition>; one being deleted, moved
# between log dirs or left stray carries a suffix after a dot (-delete, -future, -stray).
_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>\d+)")
DELETIONS_LEASE = "copy-scheduler/topic-deletions"

Marker = Callable[[list[TopicIdPartition]], Awaitable[None]]


class Cluster(Protocol):
    bootstrap_servers: str

    def view(self, broker_id: int) -> ClusterView: ...

    def topic_id(self, name: str) -> uuid.UUID | None: ...


def partition_directories(log_dirs: Iterable[str]) -> dict[tuple[str, int], Path]:
    """(topic, partition) -> its directory, over the broker's log dirs."""
    found = {}
    for root in log_dirs:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in Path(root).iterdir():
                named = _PARTITION_DIR.fullmatch(entry.name)
                if named and entry.is_dir():
                    found[(named["topic"], int(named["partition"]))] = entry
    return found


def tiered(topic: TopicView, pattern: re.Pattern[str] | None) -> bool:
    """remote.storage.enable=true, or a name the pattern matches; never an internal
    topic (__consumer_offsets, remotelog's own) nor a compacted one, which Kafka
    refuses to tier."""
    if topic.name.startswith("__"):
        return False
    if "compact" in topic.configs.get("cleanup.policy", "delete"):
        return False
    if topic.configs.get("remote.storage.enable", "false").lower() == "true":
        return True
    return pattern is not None and pattern.fullmatch(topic.name) is not None


def _retention(configs: Mapping[str, str]) -> dict[str, int | None]:
    def number(key: str) -> int | None:
        try:
            return int(configs[key])
        except (KeyError, ValueError):
            return None  # not reported by this broker: the scheduler's default

    return {
        "retention_ms": number("retention.ms"),
        "retention_bytes": number("retention.bytes"),
        "local_retention_ms": number("local.retention.ms"),
        "local_retention_bytes": number("local.retention.bytes"),
    }


def _read_topic_id(directory: Path) -> uuid.UUID | None:
    path = directory / PARTITION_METADATA
    try:
        return parse_partition_metadata(path.read_text(), str(path))
    except (FileNotFoundError, CorruptStateFileError):
        return None  # just created (Kafka writes it right after the directory), or gone


def _latest_epoch(directory: Path) -> int:
    """The partition's newest leader epoch: a leader writes its own when it takes over."""
    path = directory / LEADER_EPOCH_CHECKPOINT
    try:
        epochs = parse_leader_epoch_checkpoint(path.read_text(), str(path))
    except (FileNotFoundError, CorruptStateFileError):
        return 0
    return epochs[-1][0] if epochs else 0


def discover(
    view: ClusterView,
    broker_id: int,
    log_dirs: Iterable[str],
    pattern: re.Pattern[str] | None,
) -> dict[TopicIdPartition, Assignment]:
    """The tiered partitions with a replica and a directory on this broker, as assignments
    (blocking: it reads each directory's state files)."""
    directories = partition_directories(log_dirs)
    found = {}
    for topic in view.topics.values():
        if not tiered(topic, pattern):
            continue
        retention = _retention(topic.configs)
        for partition, where in topic.partitions.items():
            directory = directories.get((topic.name, partition))
            if broker_id not in where.replicas or directory is None:
                continue
            if _read_topic_id(directory) != topic.topic_id:
                continue  # a directory of an earlier topic of that name, not deleted yet
            tip = TopicIdPartition(topic.topic_id, topic.name, partition)
            role = Role.LEADER if where.leader == broker_id else Role.FOLLOWER
            found[tip] = Assignment(tip, directory, _latest_epoch(directory), role, **retention)
    return found


class PartitionDiscovery:
    def __init__(
        self,
        config: CopySchedulerConfig,
        scheduler: CopyScheduler,
        cluster: Cluster,
        remote: RemotePartitionLister,
        mark_for_deletion: Marker,
        leases: Leases,
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.cluster = cluster
        self.remote = remote
        self.mark_for_deletion = mark_for_deletion
        self.leases = leases
        self.log_dirs = config.discovery_log_dirs()
        pattern = config.discovery_topic_pattern
        self.pattern = re.compile(pattern) if pattern else None
        self.timeout_s = config.rpc_timeout_ms / 1000
        # What discovery handed the scheduler, as it handed it.
        self.assigned: dict[TopicIdPartition, Assignment] = {}
        # Topic ids with remote data the last look did not find in the cluster.
        self._absent: set[uuid.UUID] = set()
        # Marked for deletion and still listed with remote data: not marked again.
        self.marked: set[TopicIdPartition] = set()
        # The partitions the last look found this broker leading.
        self._led: set[TopicIdPartition] = set()
        # Since when looks fail, and how the first failed ("unreachable", "denied").
        self._failing: tuple[float, str] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return f"broker {self.config.broker_id}'s discovery"

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="partition-discovery")

    async def close(self) -> None:
        await cancel_and_wait([self._task] if self._task else [])
        self._task = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except RemoteLogError as error:
                # The metadata manager or the remover: asked again next interval.
                log.warning("%s: %s", self.name, error)
            except Exception:  # a bug: keep following the broker
                log.exception("%s failed", self.name)
            await asyncio.sleep(self.config.discovery_interval_ms / 1000)

    async def run_once(self) -> None:
        """One look at the cluster and the log dirs, and what follows from it."""
        try:
            view = await asyncio.to_thread(self.cluster.view, self.config.broker_id)
        except KafkaUnavailableError as error:
            self._failed(error, "unreachable")
            return
        except ClusterAccessDeniedError as error:
            self._failed(error, "denied")
            return
        self._count_look("answered")
        self._reached()
        found = await asyncio.to_thread(
            discover, view, self.config.broker_id, self.log_dirs, self.pattern
        )
        await self._apply(self._follow_first(found))
        await self._follow_deletions(view)

    def _follow_first(
        self, found: dict[TopicIdPartition, Assignment]
    ) -> dict[TopicIdPartition, Assignment]:
        """A partition this broker newly leads is followed for one look first. The
        previous leader's sidecar takes it as a follower at its own next look, usually
        within an interval of the change; this one leads it an interval after seeing
        the change, so the old copier has usually stopped first (the lease fences a
        run of a sidecar whose look came late)."""
        led_before, self._led = (
            self._led,
            {tip for tip, assignment in found.items() if assignment.role is Role.LEADER},
        )
        return {
            tip: (
                assignment
                if assignment.role is Role.FOLLOWER or tip in led_before
                else dataclasses.replace(assignment, role=Role.FOLLOWER)
            )
            for tip, assignment in found.items()
        }

    def _count_look(self, outcome: str) -> None:
        self.scheduler.ctx.metrics.add(m.DISCOVERY_LOOKS, 1, {"outcome": outcome})

    def _failed(self, error: RemoteLogError, outcome: str) -> None:
        """A look without a view: counted; told once while looks keep failing so (an
        access refused at ERROR: only an operator's change of ACLs mends it)."""
        self._count_look(outcome)
        if self._failing is not None and self._failing[1] == outcome:
            log.debug("%s: still %s: %s", self.name, outcome, error)
            return
        self._failing = (time.monotonic(), outcome)
        log.log(
            logging.ERROR if outcome == "denied" else logging.WARNING,
            "%s: %s; the %d partitions found so far keep their roles, asked again every %g s",
            self.name,
            error,
            len(self.assigned),
            self.config.discovery_interval_ms / 1000,
        )

    def _reached(self) -> None:
        if self._failing is None:
            return
        since, outcome = self._failing
        log.info(
            "%s: Kafka at %s answers again after %.0f s %s",
            self.name,
            self.cluster.bootstrap_servers,
            time.monotonic() - since,
            outcome,
        )
        self._failing = None

    async def _apply(self, found: dict[TopicIdPartition, Assignment]) -> None:
        # Stopped first: a partition that moved away is not copied here any longer.
        gone = [tip for tip in self.assigned if tip not in found]
        if gone:
            await self.scheduler.stop_partitions((tip, False) for tip in gone)
            for tip in gone:
                del self.assigned[tip]
        changed = [a for tip, a in found.items() if self.assigned.get(tip) != a]
        if changed:
            taken = await self.scheduler.take_found(changed)
            self.assigned.update((a.topic_id_partition, a) for a in taken)

    async def _follow_deletions(self, view: ClusterView) -> None:
        """Mark the remote data of topic ids gone from the cluster for deletion. A topic
        counts as deleted when two looks in a row miss it (every sidecar has had an
        interval to stop copying it) and it is not there when asked by name."""
        try:
            remote = await self.remote.list_remote_partitions(timeout_s=self.timeout_s)
        except MetadataNotReadyError:
            return
        present = view.topic_ids()
        listed = {summary.topic_id_partition for summary in remote}
        # Gone from the listing: the remover finished, nothing left to remember.
        self.marked &= listed
        absent: dict[uuid.UUID, list[TopicIdPartition]] = {}
        for tip in listed:
            if tip.topic_id not in present and tip not in self.marked:
                absent.setdefault(tip.topic_id, []).append(tip)
        due = {topic_id: tips for topic_id, tips in absent.items() if topic_id in self._absent}
        self._absent = set(absent)
        if not due:
            return
        lease_name, owner = DELETIONS_LEASE, self.scheduler.owner
        async with held(self.leases, lease_name, owner, self.config.lease_ms) as lease:
            if lease is None:
                return  # another sidecar is marking them
            for topic_id, tips in due.items():
                name = tips[0].topic
                try:
                    now = await asyncio.to_thread(self.cluster.topic_id, name)
                except (KafkaUnavailableError, ClusterAccessDeniedError) as error:
                    # This look answered; only the question by name did not.
                    log.warning(
                        "%s: could not ask whether topic %s (id %s) still exists: %s; "
                        "its remote data is not marked, asked again at the next look",
                        self.name,
                        name,
                        topic_id,
                        error,
                    )
                    return
                if now == topic_id:
                    continue  # still there: the view missed it
                lease.check()
                await self.mark_for_deletion(tips)
                self.marked.update(tips)
                log.info(
                    "%s: topic %s (id %s) was deleted; its %d partitions with remote data "
                    "are marked for deletion",
                    self.name,
                    name,
                    topic_id,
                    len(tips),
                )
