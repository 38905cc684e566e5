"""`remotelog recover`: the metadata topic rebuilt from a store's manifests, as a report."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TextIO

from remotelog.client import MetadataClient
from remotelog.client.service_options import service_client_options
from remotelog.core.addresses import host_port_list
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.kafka_client import kafka_client_config
from remotelog.core.model import (
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    kafka_uuid_str,
    parse_kafka_uuid,
    validate_topic_name,
)
from remotelog.recovery.config import RecoverConfig
from remotelog.recovery.rebuild import PartitionRecovery, Recovery, RecoveryReport
from remotelog.scheduler.cluster import KafkaCluster
from remotelog.segmentstore.factory import open_backend, require_bucket, storage_location
from remotelog.segmentstore.layout import validate_key_prefix


def _partition(tip: TopicIdPartition) -> str:
    return f"{tip.topic}-{tip.partition}"


# Exit status of a run that wrote everything it could read, but not everything: gaps,
# overlaps, skipped manifests, refused partitions, a topic of two ids.
INCOMPLETE = 3


def report_lines(report: RecoveryReport) -> list[str]:
    """After the partitions: the refused ones, the skipped manifests, and each topic
    whose partitions came under more than one topic id."""
    lines = [
        f"refused  {_partition(r.topic_id_partition)}  topic id "
        f"{kafka_uuid_str(r.topic_id_partition.topic_id)}  {r.segments} segments  ({r.why})"
        for r in report.refused
    ]
    lines += [
        f"left  {_partition(n.topic_id_partition)}  topic id "
        f"{kafka_uuid_str(n.topic_id_partition.topic_id)}  {n.segments} segments  ("
        + (
            f"the cluster's {n.topic_id_partition.topic} is {kafka_uuid_str(n.cluster_topic_id)}"
            if n.cluster_topic_id is not None
            else f"the cluster has no topic {n.topic_id_partition.topic}"
        )
        + ")"
        for n in report.not_in_cluster
    ]
    lines += [f"skipped  {s.key}  ({s.why})" for s in report.skipped]
    for topic, ids in sorted(report.topic_ids.items()):
        if len(ids) > 1:
            named = ", ".join(sorted(kafka_uuid_str(i) for i in ids))
            lines.append(
                f"topic ids  {topic}  {named}: the bucket holds more than one incarnation; "
                "name the live one with --topic-id"
            )
    return lines


def _segment(segment: RemoteLogSegmentMetadata) -> str:
    epochs = ",".join(f"{epoch}@{offset}" for epoch, offset in segment.segment_leader_epochs)
    return (
        f"{segment.remote_log_segment_id.id}  offsets {segment.start_offset}-"
        f"{segment.end_offset}  leader epochs {epochs}  broker {segment.broker_id}"
    )


def render_partition(recovered: PartitionRecovery, dry_run: bool) -> list[str]:
    name = _partition(recovered.topic_id_partition)
    verb = "would write" if dry_run else "wrote"
    lines = [f"{verb}  {name}  {_segment(s)}" for s in recovered.missing]
    verb = "would complete" if dry_run else "completed"
    lines += [
        f"{verb}  {name}  {_segment(s)}  was COPY_SEGMENT_STARTED, its copy whole in the "
        "store: COPY_SEGMENT_FINISHED"
        for s in recovered.completed
    ]
    lines += [
        f"gap  {name}  offsets {g.first_missing}-{g.last_missing} are in no segment"
        for g in recovered.gaps
    ]
    lines += [
        f"overlap  {name}  {o.earlier.remote_log_segment_id.id} "
        f"({o.earlier.start_offset}-{o.earlier.end_offset}) and "
        f"{o.later.remote_log_segment_id.id} ({o.later.start_offset}-{o.later.end_offset})"
        for o in recovered.overlaps
    ]
    return lines


def summary(report: RecoveryReport, where: str, cluster: str | None = None) -> str:
    missing, found = report.segments_missing, report.segments_found
    completed, gaps, overlaps = report.segments_completed, report.gaps, report.overlaps
    ids = sorted(
        f"{topic} {kafka_uuid_str(i)}" for topic, of in report.topic_ids.items() for i in of
    )
    line = (
        f"recover {where}: {found} segments in {report.partitions} partitions "
        f"({report.objects_scanned} objects listed); {found - missing - completed} already "
        f"known, {missing} {'to write' if report.dry_run else 'written'}, {completed} "
        f"{'to complete' if report.dry_run else 'completed'}; {gaps} gaps, "
        f"{overlaps} overlaps, {len(report.skipped)} manifests skipped, "
        f"{len(report.refused)} partitions refused; topic ids: {', '.join(ids) or 'none'}"
    )
    if cluster is not None:
        line += (
            f" (the ids the cluster at {cluster} has; {len(report.not_in_cluster)} "
            "partitions of other ids left)"
        )
    else:
        line += " (as found in the store)"
    if report.dry_run:
        line += "; dry run, nothing written"
    return line


class Progress:
    """One line on a terminal, rewritten as partitions finish; nothing elsewhere."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = stream.isatty()
        self.partitions = self.segments = self.missing = 0

    def partition_done(self, recovered: PartitionRecovery, dry_run: bool) -> None:
        self.partitions += 1
        self.segments += len(recovered.segments)
        self.missing += len(recovered.missing)
        if self.shown:
            verb = "to write" if dry_run else "written"
            self.stream.write(
                f"\rrecovering: {self.partitions} partitions, {self.segments} segments, "
                f"{self.missing} {verb} (at {_partition(recovered.topic_id_partition)})\x1b[K"
            )
            self.stream.flush()

    def end(self) -> None:
        if self.shown and self.partitions:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def recovery_name() -> str:
    """What a second run, refused, is told of this one."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"remotelog recover on {socket.gethostname()} (pid {os.getpid()}, since {started})"


async def run_recover(
    config: RecoverConfig,
    *,
    topic: str | None,
    topic_id: str | None = None,
    bootstrap_server: str | None = None,
    dry_run: bool,
    out: Callable[[str], None],
    progress: Progress | None = None,
) -> RecoveryReport:
    validate_key_prefix(config.key_prefix)
    if topic is not None:
        validate_topic_name(topic, "--topic")
    if topic_id is not None and topic is None:
        raise InvalidArgumentError("--topic-id", "names an incarnation of --topic: give both")
    incarnation = None if topic_id is None else parse_kafka_uuid(topic_id, "--topic-id")
    require_bucket(config)
    cluster_topic_ids = None
    if bootstrap_server is not None:
        if topic_id is not None:
            raise InvalidArgumentError(
                "--topic-id",
                "the cluster names the live incarnation: give --bootstrap-server "
                "or --topic-id, not both",
            )
        cluster_topic_ids = await _cluster_topic_ids(config, bootstrap_server)
    progress = progress or Progress(sys.stderr)
    backoff = config.backoff()
    backend = await open_backend(config, backoff)
    options = service_client_options(
        config, timeout_s=config.rpc_timeout_ms / 1000, backoff=backoff
    )
    metadata = MetadataClient(config.metadata_manager_address, options=options)

    def partition_done(recovered: PartitionRecovery) -> None:
        progress.partition_done(recovered, dry_run)
        for line in render_partition(recovered, dry_run):
            out(line)

    try:
        recovery = Recovery(
            backend,
            metadata,
            recovery_name(),
            key_prefix=config.key_prefix,
            topic=topic,
            topic_id=incarnation,
            cluster_topic_ids=cluster_topic_ids,
            timeout_s=options.timeout_s,
            custom_metadata_max_bytes=config.custom_metadata_max_bytes,
        )
        report = await recovery.run(dry_run=dry_run, on_partition=partition_done)
    finally:
        progress.end()
        await metadata.close()
        await backend.close()
    for line in report_lines(report):
        out(line)
    where = storage_location(config)
    out(summary(report, where, bootstrap_server))
    return report


async def _cluster_topic_ids(config: RecoverConfig, bootstrap_server: str) -> dict[str, uuid.UUID]:
    """The topics of the cluster at `bootstrap_server` (under the config's Kafka
    security settings), with their ids."""
    problem = host_port_list(bootstrap_server)
    if problem is not None:
        raise InvalidArgumentError("--bootstrap-server", problem)
    client_config = kafka_client_config(replace(config, bootstrap_servers=bootstrap_server))
    cluster = KafkaCluster(
        client_config, config.rpc_timeout_ms / 1000, principal="recover's principal"
    )
    return await asyncio.to_thread(cluster.topic_ids)
