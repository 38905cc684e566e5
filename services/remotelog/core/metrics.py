"""Every metric remotelog reports, defined once with one meaning, as Kafka keeps its own
in RemoteStorageMetrics.

A metric's OpenTelemetry name is `remotelog.<what>`; the Prometheus exporter turns
the dots into underscores and adds the unit and `_total` to a counter
(`remotelog.remote.copy` in bytes is `remotelog_remote_copy_bytes_total`). Its help
text says what it counts and, where Kafka has the same metric, Kafka's name.
docs/architecture.md tables them; a test checks the table against this module.

Instruments are made by the objects that count, as a service starts; the same
metric made again in one process is the same instrument (OpenTelemetry's rule),
so each event is counted once, where it happens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from opentelemetry import metrics

Kind = Literal["counter", "histogram", "gauge"]
Attributes = Mapping[str, str] | None


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Kind
    unit: str
    meaning: str
    kafka: str = ""  # Kafka's name of the same metric, if it has one
    service: str = ""  # the services that count it

    @property
    def description(self) -> str:
        return f"{self.meaning} (Kafka: {self.kafka})" if self.kafka else self.meaning


def _metric(
    name: str, kind: Kind, unit: str, service: str, meaning: str, kafka: str = ""
) -> Metric:
    return Metric(f"remotelog.{name}", kind, unit, meaning, kafka, service)


COPY, FETCH, STORE, METADATA, REMOVER = (
    "copy scheduler",
    "remote fetch",
    "segment store",
    "metadata manager",
    "partition remover",
)

# What Kafka's RemoteLogManager counts, by topic: counted by the services in its role.
REMOTE_COPY_BYTES = _metric(
    "remote.copy",
    "counter",
    "By",
    COPY,
    "Bytes of log segments copied to the remote tier (the .log file, as Kafka counts)",
    "RemoteCopyBytesPerSec",
)
REMOTE_COPY_REQUESTS = _metric(
    "remote.copy.requests",
    "counter",
    "{request}",
    COPY,
    "Segment copies started",
    "RemoteCopyRequestsPerSec",
)
REMOTE_COPY_ERRORS = _metric(
    "remote.copy.errors",
    "counter",
    "{error}",
    COPY,
    "Segment copies that failed",
    "RemoteCopyErrorsPerSec",
)
REMOTE_COPY_THROTTLE_TIME = _metric(
    "remote.copy.throttle.time",
    "histogram",
    "ms",
    COPY,
    "How long copies waited for the copy quota (KIP-956)",
    "RemoteCopyThrottleTime",
)
SEGMENTS_DELETED_BEFORE_TIERING = _metric(
    "segments.deleted.before.tiering",
    "counter",
    "{segment}",
    COPY,
    "Rolled segments the broker's own retention deleted before they were tiered",
)
DISCOVERY_LOOKS = _metric(
    "discovery.looks",
    "counter",
    "{look}",
    COPY,
    "Looks of a sidecar's discovery at the cluster, by outcome: answered, unreachable, "
    "or denied (the cluster refused discovery's principal)",
)
REMOTE_DELETE_REQUESTS = _metric(
    "remote.delete.requests",
    "counter",
    "{request}",
    f"{COPY}, {REMOVER}",
    "Remote segment deletions started (retention, or a deleted topic)",
    "RemoteDeleteRequestsPerSec",
)
REMOTE_DELETE_ERRORS = _metric(
    "remote.delete.errors",
    "counter",
    "{error}",
    f"{COPY}, {REMOVER}",
    "Remote segment deletions that failed",
    "RemoteDeleteErrorsPerSec",
)
REMOTE_FETCH_BYTES = _metric(
    "remote.fetch",
    "counter",
    "By",
    FETCH,
    "Record bytes read from the remote tier and answered",
    "RemoteFetchBytesPerSec",
)
REMOTE_FETCH_REQUESTS = _metric(
    "remote.fetch.requests",
    "counter",
    "{request}",
    FETCH,
    "Partition reads from the remote tier",
    "RemoteFetchRequestsPerSec",
)
REMOTE_FETCH_ERRORS = _metric(
    "remote.fetch.errors",
    "counter",
    "{error}",
    FETCH,
    "Partition reads from the remote tier that failed",
    "RemoteFetchErrorsPerSec",
)
REMOTE_FETCH_THROTTLE_TIME = _metric(
    "remote.fetch.throttle.time",
    "histogram",
    "ms",
    FETCH,
    "How long reads waited for the fetch quota (KIP-956)",
    "RemoteFetchThrottleTime",
)
REMOTE_FETCH_EXPIRES = _metric(
    "remote.fetch.expires",
    "counter",
    "{fetch}",
    FETCH,
    "Delayed remote fetches answered at their deadline, unfinished",
    "DelayedRemoteFetchMetrics ExpiresPerSec",
)
REMOTE_INDEX_CACHE_HITS = _metric(
    "remote.index.cache.hits", "counter", "{lookup}", FETCH, "Index lookups the cache answered"
)
REMOTE_INDEX_CACHE_MISSES = _metric(
    "remote.index.cache.misses",
    "counter",
    "{lookup}",
    FETCH,
    "Index lookups that fetched the index from the segment store",
)
REMOTE_INDEX_CACHE_EVICTIONS = _metric(
    "remote.index.cache.evictions",
    "counter",
    "{entry}",
    FETCH,
    "Indexes dropped from the cache to stay within its size",
)

# What the segment store itself served: every byte it wrote or read for its callers,
# indexes included, whoever called (Kafka's plugin, the scheduler, remote fetch).
STORE_COPY_BYTES = _metric(
    "segment.store.copy",
    "counter",
    "By",
    STORE,
    "Bytes the segment store wrote for copies: the log and its indexes",
)
STORE_COPY_REQUESTS = _metric(
    "segment.store.copy.requests", "counter", "{request}", STORE, "Copies the store received"
)
STORE_COPY_ERRORS = _metric(
    "segment.store.copy.errors", "counter", "{error}", STORE, "Copies the store failed"
)
STORE_UPLOADS_ABORTED = _metric(
    "segment.store.uploads.aborted",
    "counter",
    "{upload}",
    STORE,
    "Uploads of copies cut off (a temp file, an S3 multipart upload) the store aborted "
    "once older than incomplete.uploads.abort.after.ms",
)
STORE_FETCH_BYTES = _metric(
    "segment.store.fetch",
    "counter",
    "By",
    STORE,
    "Bytes the segment store read for its callers: log ranges and indexes",
)
STORE_FETCH_REQUESTS = _metric(
    "segment.store.fetch.requests",
    "counter",
    "{request}",
    STORE,
    "Log and index reads the store received",
)
STORE_FETCH_ERRORS = _metric(
    "segment.store.fetch.errors", "counter", "{error}", STORE, "Log and index reads that failed"
)
STORE_READ_AHEAD_CHUNKS = _metric(
    "segment.store.read.ahead.chunks",
    "counter",
    "{chunk}",
    STORE,
    "Chunks of segment logs and indexes the store asked S3 for ahead of a reader",
)
STORE_READ_AHEAD_HITS = _metric(
    "segment.store.read.ahead.hits",
    "counter",
    "{chunk}",
    STORE,
    "Chunks a read found held or on their way instead of asking S3",
)
AUX_STATE_REQUESTS = _metric(
    "build.remote.log.aux.state.requests",
    "counter",
    "{request}",
    STORE,
    "A follower's reads of a segment's leader-epoch checkpoint or producer snapshot",
    "BuildRemoteLogAuxStateRequestsPerSec",
)
AUX_STATE_ERRORS = _metric(
    "build.remote.log.aux.state.errors",
    "counter",
    "{error}",
    STORE,
    "Those reads that failed",
    "BuildRemoteLogAuxStateErrorsPerSec",
)

METADATA_READ_LATENCY = _metric(
    "metadata.read.latency",
    "histogram",
    "ms",
    METADATA,
    "Time to answer a segment lookup or listing from the materialised metadata",
)
METADATA_WRITE_LATENCY = _metric(
    "metadata.write.latency",
    "histogram",
    "ms",
    METADATA,
    "Time from a metadata write to its event consumed back from the metadata topic",
)

# Gauges, read from the live object that registers them (core.gauges).
REMOTE_COPY_LAG_BYTES = _metric(
    "remote.copy.lag",
    "gauge",
    "By",
    COPY,
    "Bytes of rolled segments not yet tiered, per partition (KIP-963)",
    "RemoteCopyLagBytes",
)
REMOTE_COPY_LAG_SEGMENTS = _metric(
    "remote.copy.lag.segments",
    "gauge",
    "{segment}",
    COPY,
    "Rolled segments not yet tiered, per partition",
    "RemoteCopyLagSegments",
)
REMOTE_DELETE_LAG_BYTES = _metric(
    "remote.delete.lag",
    "gauge",
    "By",
    COPY,
    "Bytes of remote segments due for deletion, per partition",
    "RemoteDeleteLagBytes",
)
REMOTE_DELETE_LAG_SEGMENTS = _metric(
    "remote.delete.lag.segments",
    "gauge",
    "{segment}",
    COPY,
    "Remote segments due for deletion, per partition",
    "RemoteDeleteLagSegments",
)
REMOTE_LOG_SIZE_BYTES = _metric(
    "remote.log.size",
    "gauge",
    "By",
    COPY,
    "Bytes of a partition in the remote tier",
    "RemoteLogSizeBytes",
)
REMOTE_LOG_SIZE_COMPUTATION_TIME = _metric(
    "remote.log.size.computation.time",
    "gauge",
    "ms",
    COPY,
    "Time the last remote log size took to compute, per partition",
    "RemoteLogSizeComputationTime",
)
REMOTE_LOG_METADATA_COUNT = _metric(
    "remote.log.metadata.count",
    "gauge",
    "{segment}",
    COPY,
    "Remote segments of a partition",
    "RemoteLogMetadataCount",
)
REMOTE_LOG_MANAGER_TASKS_IDLE = _metric(
    "remote.log.manager.tasks.idle",
    "gauge",
    "%",
    COPY,
    "Share of the copy and expiration workers idle",
    "RemoteLogManagerTasksAvgIdlePercent",
)
REMOTE_LOG_READER_TASK_QUEUE_SIZE = _metric(
    "remote.log.reader.task.queue.size",
    "gauge",
    "{task}",
    FETCH,
    "Reads waiting for a reader",
    "RemoteLogReaderTaskQueueSize",
)
REMOTE_LOG_READER_IDLE = _metric(
    "remote.log.reader.idle",
    "gauge",
    "%",
    FETCH,
    "Share of the readers idle",
    "RemoteLogReaderAvgIdlePercent",
)
REMOTE_FETCH_PURGATORY_DELAYED = _metric(
    "remote.fetch.purgatory.delayed",
    "gauge",
    "{fetch}",
    FETCH,
    "Delayed remote fetches waiting in the purgatory",
)
REMOTE_INDEX_CACHE_SIZE = _metric(
    "remote.index.cache.size", "gauge", "By", FETCH, "Disk the remote index cache uses"
)
METADATA_SEGMENTS = _metric(
    "metadata.segments",
    "gauge",
    "{segment}",
    METADATA,
    "Live segments the metadata manager holds materialised, all partitions",
)
REMOTE_PARTITIONS_PENDING_DELETION = _metric(
    "remote.partitions.pending.deletion",
    "gauge",
    "{partition}",
    REMOVER,
    "Partitions marked for deletion whose remote data is not all deleted",
)

ALL_METRICS: tuple[Metric, ...] = tuple(
    v for v in dict(globals()).values() if isinstance(v, Metric)
)


def counter(scope: str, metric: Metric) -> metrics.Counter:
    """The counter of `metric` on the meter of `scope`; the same one when made again."""
    _check(metric, "counter")
    meter = metrics.get_meter(scope)
    return meter.create_counter(metric.name, unit=metric.unit, description=metric.description)


def histogram(scope: str, metric: Metric) -> metrics.Histogram:
    _check(metric, "histogram")
    meter = metrics.get_meter(scope)
    return meter.create_histogram(metric.name, unit=metric.unit, description=metric.description)


class Instruments:
    """The counters and histograms one service counts (`Metric.service`), made as it
    starts: `add(metric, amount)`, `record(metric, value)`."""

    def __init__(self, scope: str, service: str) -> None:
        counted = [x for x in ALL_METRICS if service in x.service.split(", ")]
        self._counters = {x: counter(scope, x) for x in counted if x.kind == "counter"}
        self._histograms = {x: histogram(scope, x) for x in counted if x.kind == "histogram"}

    def add(self, metric: Metric, amount: int, attributes: Attributes = None) -> None:
        self._counters[metric].add(amount, attributes)

    def record(self, metric: Metric, value: float, attributes: Attributes = None) -> None:
        self._histograms[metric].record(value, attributes)


def _check(metric: Metric, kind: Kind) -> None:
    if metric.kind != kind:
        raise TypeError(f"{metric.name} is a {metric.kind}, not a {kind}")
