"""The `remotelog` source's options, named and checked as Spark's Kafka source names them.

Everything is checked on the driver before a task runs; a bad option raises
InvalidArgumentError naming it. Options of Spark's Kafka source that mean nothing
here are refused by name, with the reason, rather than ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from remotelog.core.errors import InvalidArgumentError
from remotelog.core.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

_OWN_RETRIES = (
    "the remotelog source's driver asks the metadata manager, whose client retries "
    "by its own policy, not the broker"
)
# Options of Spark's Kafka source refused here, and why.
REFUSED = {
    "fetchoffset.numretries": _OWN_RETRIES,
    "fetchoffset.retryintervalms": _OWN_RETRIES,
    "kafkaconsumer.polltimeoutms": "the remotelog source reads the tail until the broker "
    "reports the partition's end, however long a poll takes",
}
# kafka.* settings Spark's Kafka source refuses as well: the source owns them.
KAFKA_REFUSED = {
    "kafka.auto.offset.reset": "use startingOffsets",
    "kafka.enable.auto.commit": "the source commits no offsets to Kafka",
    "kafka.key.deserializer": "keys are always read as bytes",
    "kafka.value.deserializer": "values are always read as bytes",
    "kafka.interceptor.classes": "the tail consumer is librdkafka's, not Java's",
}
# Options of the source itself, not passed on to the tail consumer.
_KAFKA_OWN = ("kafka.bootstrap.servers", "kafka.isolation.level")
# spark.sql.files.maxPartitionBytes's default: a task's remote segments, at most.
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
# Spark's Kafka source's default maxTriggerDelay.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
# Where a streaming query ends is up to its trigger, as in Spark's Kafka source.
BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
KNOWN = frozenset(
    {
        "remotelog.fetch.address",
        "remotelog.metadata.address",
        "remotelog.tls.root.certs.file",
        "remotelog.tls.cert.file",
        "remotelog.tls.key.file",
        "remotelog.auth.token.file",
        "remotelog.pushfilters",
        "remotelog.segment.store.short.circuit.socket.path",
        "kafka.bootstrap.servers",
        "assign",
        "subscribe",
        "subscribepattern",
        "startingoffsets",
        "endingoffsets",
        "failondataloss",
        "includeheaders",
        "isolationlevel",
        "kafka.isolation.level",
        "minpartitions",
        "maxrecordsperpartition",
        "remotelog.maxbytesperpartition",
        "remotelog.fetchurls",
        "remotelog.hedgepercentile",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "startingoffsetsbytimestampstrategy",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "groupidprefix",
    }
)


@dataclass(frozen=True)
class Subscription:
    """Exactly one of Spark's three ways to name what to read."""

    kind: str  # "assign", "subscribe" or "subscribePattern"
    topics: tuple[str, ...] = ()
    partitions: tuple[tuple[str, int], ...] = ()
    pattern: str = ""

    def matches(self, topic: str, partition: int) -> bool:
        if self.kind == "assign":
            return (topic, partition) in self.partitions
        if self.kind == "subscribe":
            return topic in self.topics
        return re.fullmatch(self.pattern, topic) is not None

    def topic_names(self) -> tuple[str, ...] | None:
        """The topics to list, or None for all (a pattern)."""
        if self.kind == "assign":
            return tuple(dict.fromkeys(topic for topic, _ in self.partitions))
        if self.kind == "subscribe":
            return self.topics
        return None


@dataclass(frozen=True)
class Bound:
    """Where reading starts or ends: earliest, latest or offsets per partition, unless a
    timestamp applies (`...Timestamp` over `...OffsetsByTimestamp` over `...Offsets`)."""

    default: int  # EARLIEST_TIMESTAMP or LATEST_TIMESTAMP
    offsets: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset)
    timestamp: int | None = None  # for every partition
    timestamps: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, timestamp)

    def of(self, topic: str, partition: int) -> int:
        found = _lookup(self.offsets, topic, partition)
        return self.default if found is None else found

    def timestamp_of(self, topic: str, partition: int) -> int | None:
        if self.timestamp is not None:
            return self.timestamp
        return _lookup(self.timestamps, topic, partition)


def _lookup(entries: tuple[tuple[str, int, int], ...], topic: str, partition: int) -> int | None:
    for t, p, value in entries:
        if (t, p) == (topic, partition):
            return value
    return None


@dataclass(frozen=True)
class ReadOptions:
    fetch_address: str
    metadata_address: str
    subscription: Subscription
    starting: Bound
    ending: Bound
    bootstrap_servers: str | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_committed: bool = False
    tls_root_certs_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # A service with authorization.enabled gives the token's role (reader) to the reads.
    bearer_token: str = field(default="", repr=False)
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    # Bytes of remote segments a task reads at most (planning.segment_cuts).
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    # No record at or after a starting timestamp: "error" fails the query, "latest"
    # starts at the end (Spark's startingOffsetsByTimestampStrategy).
    timestamp_strategy: str = "error"
    # Prune by pushed filters. Spark refuses a source that takes filters unless
    # spark.sql.python.filterPushdown.enabled is true, which a source cannot see.
    push_filters: bool = False
    max_offsets_per_trigger: int | None = None  # streaming admission control
    # Streaming: wait for this many new offsets, up to max_trigger_delay_ms since the
    # last micro-batch (Spark's KafkaMicroBatchStream.delayBatch).
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    # The tail consumer's kafka.* settings, prefix removed, and its group id's prefix.
    kafka_config: tuple[tuple[str, str], ...] = ()
    group_id_prefix: str = "remotelog-tiered"
    # The segment store's short.circuit.socket.path: a task on its host reads whole
    # segments from the stored files (remotelog.client.segment_files).
    short_circuit_socket: str = ""
    # Tasks read object storage themselves, by the URLs the fetch service locates
    # (remotelog.client.url_ranges); false: every byte through the fetch service.
    fetch_urls: bool = True
    # A task's GET whose first byte is later than this percentile of its recent ones is
    # asked a second time (0: never).
    hedge_percentile: float = 95.0


def parse_options(raw: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """The options of a batch read or (`streaming`) a stream, whose start defaults to
    latest and which takes no ending bound."""
    options = {key.lower(): value for key, value in raw.items() if key.lower() != "path"}
    for name in BATCH_ONLY if streaming else ():
        if name.lower() in options:
            raise InvalidArgumentError(name, "is not valid in a streaming query")
    for key in options:
        refused = REFUSED.get(key) or KAFKA_REFUSED.get(key)
        if refused:
            raise InvalidArgumentError(key, f"is not an option of the remotelog source: {refused}")
        if key not in KNOWN and not key.startswith("kafka."):
            raise InvalidArgumentError(key, "is not an option of the remotelog source")
    for required in ("remotelog.fetch.address", "remotelog.metadata.address"):
        if not options.get(required):
            raise InvalidArgumentError(required, "is required")
    isolation = options.get("isolationlevel", options.get("kafka.isolation.level", ""))
    if isolation not in ("", "read_uncommitted", "read_committed"):
        raise InvalidArgumentError(
            "isolationLevel", f"{isolation!r}: read_uncommitted or read_committed"
        )
    return ReadOptions(
        fetch_address=options["remotelog.fetch.address"],
        metadata_address=options["remotelog.metadata.address"],
        subscription=_subscription(options),
        starting=_with_timestamps(
            _bound(
                options.get("startingoffsets", "latest" if streaming else "earliest"),
                "startingOffsets",
                ending=False,
                streaming=streaming,  # a stream may start at the end
            ),
            options,
            "starting",
        ),
        ending=_with_timestamps(
            _bound(options.get("endingoffsets", "latest"), "endingOffsets", ending=True),
            options,
            "ending",
        ),
        bootstrap_servers=options.get("kafka.bootstrap.servers") or None,
        fail_on_data_loss=_boolean(options.get("failondataloss", "true"), "failOnDataLoss"),
        include_headers=_boolean(options.get("includeheaders", "false"), "includeHeaders"),
        read_committed=isolation == "read_committed",
        tls_root_certs_file=options.get("remotelog.tls.root.certs.file", ""),
        tls_cert_file=options.get("remotelog.tls.cert.file", ""),
        tls_key_file=options.get("remotelog.tls.key.file", ""),
        bearer_token=_token(options.get("remotelog.auth.token.file", "")),
        min_partitions=_positive(options.get("minpartitions"), "minPartitions"),
        max_records_per_partition=_positive(
            options.get("maxrecordsperpartition"), "maxRecordsPerPartition"
        ),
        max_bytes_per_partition=_positive(
            options.get("remotelog.maxbytesperpartition"), "remotelog.maxBytesPerPartition"
        )
        or DEFAULT_MAX_BYTES_PER_PARTITION,
        timestamp_strategy=_strategy(options.get("startingoffsetsbytimestampstrategy", "error")),
        max_offsets_per_trigger=_positive(
            options.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger"
        ),
        min_offsets_per_trigger=_positive(
            options.get("minoffsetspertrigger"), "minOffsetsPerTrigger"
        ),
        max_trigger_delay_ms=_duration_ms(options.get("maxtriggerdelay"), "maxTriggerDelay"),
        kafka_config=tuple(
            (key.removeprefix("kafka."), value)
            for key, value in sorted(options.items())
            if key.startswith("kafka.") and key not in _KAFKA_OWN
        ),
        group_id_prefix=options.get("groupidprefix", "remotelog-tiered"),
        push_filters=_boolean(
            options.get("remotelog.pushfilters", "false"), "remotelog.pushFilters"
        ),
        short_circuit_socket=options.get("remotelog.segment.store.short.circuit.socket.path", ""),
        fetch_urls=_boolean(options.get("remotelog.fetchurls", "true"), "remotelog.fetchUrls"),
        hedge_percentile=_percentile(
            options.get("remotelog.hedgepercentile", "95"), "remotelog.hedgePercentile"
        ),
    )


def _token(path: str) -> str:
    """The bearer token in the file `remotelog.auth.token.file` names ("" if unset)."""
    if not path:
        return ""
    key = "remotelog.auth.token.file"
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise InvalidArgumentError(key, f"cannot read {path}: {exc.strerror or exc}") from None
    if not token or any(c.isspace() for c in token):
        raise InvalidArgumentError(key, f"{path} must hold one token, without whitespace")
    return token


def headers_included(raw: Mapping[str, str]) -> bool:
    """`includeHeaders` alone: what the schema depends on, batch or stream."""
    options = {key.lower(): value for key, value in raw.items()}
    return _boolean(options.get("includeheaders", "false"), "includeHeaders")


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("assign", "subscribe", "subscribepattern") if k in options]
    if len(given) != 1:
        raise InvalidArgumentError(
            "subscribe",
            "exactly one of assign, subscribe and subscribePattern is needed"
            + (f" (given: {', '.join(given)})" if given else ""),
        )
    kind = given[0]
    value = options[kind].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise InvalidArgumentError("subscribe", "names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise InvalidArgumentError("subscribePattern", f"{value!r}: {exc}") from None
        if not value:
            raise InvalidArgumentError("subscribePattern", "is empty")
        return Subscription("subscribePattern", pattern=value)
    parsed = _json(value, "assign")
    partitions = []
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidArgumentError("assign", 'expects JSON like {"topicA":[0,1]}')
    for topic, numbers in parsed.items():
        if not isinstance(numbers, list) or not all(_is_int(n) and n >= 0 for n in numbers):
            raise InvalidArgumentError("assign", f"{topic!r}: expects a list of partitions")
        partitions += [(topic, n) for n in numbers]
    return Subscription("assign", partitions=tuple(partitions))


def _bound(value: str, name: str, *, ending: bool, streaming: bool = False) -> Bound:
    value = value.strip()
    if value == "latest" and not ending and not streaming:
        # As Spark's Kafka source: a batch query starting at the end would read nothing.
        raise InvalidArgumentError(
            name, "latest is not allowed for startingOffsets in a batch query"
        )
    if value == "earliest":
        if ending:
            raise InvalidArgumentError(name, "earliest is not allowed for endingOffsets")
        return Bound(EARLIEST_TIMESTAMP)
    if value == "latest":
        return Bound(LATEST_TIMESTAMP)
    parsed = _json(value, name)
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(name, 'expects earliest, latest or JSON like {"t":{"0":23}}')
    offsets = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise InvalidArgumentError(name, f"{topic!r}: expects {{partition: offset}}")
        for partition, offset in partitions.items():
            if not partition.isdigit() or not _is_int(offset) or offset < EARLIEST_TIMESTAMP:
                raise InvalidArgumentError(name, f"{topic}-{partition}: {offset!r} is no offset")
            if ending and offset == EARLIEST_TIMESTAMP:
                raise InvalidArgumentError(name, f"{topic}-{partition}: -2 (earliest) as an end")
            if not ending and offset == LATEST_TIMESTAMP and not streaming:
                raise InvalidArgumentError(name, f"{topic}-{partition}: -1 (latest) as a start")
            offsets.append((topic, int(partition), int(offset)))
    return Bound(LATEST_TIMESTAMP if ending else EARLIEST_TIMESTAMP, tuple(offsets))


def _with_timestamps(bound: Bound, options: Mapping[str, str], which: str) -> Bound:
    single, by_partition = f"{which}Timestamp", f"{which}OffsetsByTimestamp"
    if single.lower() in options:
        value = options[single.lower()].strip()
        if not value.isdigit():
            raise InvalidArgumentError(single, f"{value!r}: milliseconds since the epoch")
        return Bound(bound.default, bound.offsets, timestamp=int(value))
    if by_partition.lower() not in options:
        return bound
    parsed = _json(options[by_partition.lower()], by_partition)
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise InvalidArgumentError(by_partition, 'expects JSON like {"t":{"0":1700000000000}}')
    timestamps = []
    for topic, partitions in parsed.items():
        for partition, timestamp in partitions.items():
            if not partition.isdigit() or not _is_int(timestamp) or timestamp < 0:
                raise InvalidArgumentError(
                    by_partition, f"{topic}-{partition}: {timestamp!r} is no timestamp"
                )
            timestamps.append((topic, int(partition), int(timestamp)))
    return Bound(bound.default, bound.offsets, timestamps=tuple(timestamps))


def _strategy(value: str) -> str:
    if value.strip().lower() not in ("error", "latest"):
        raise InvalidArgumentError(
            "startingOffsetsByTimestampStrategy", f"{value!r}: error or latest"
        )
    return value.strip().lower()


def _json(value: str, name: str) -> object:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(name, f"is not valid JSON: {exc.msg}") from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise InvalidArgumentError(name, f"{value!r}: a positive integer")
    return int(value)


def _duration_ms(value: str | None, name: str) -> int:
    """Spark's time strings ("15m", "30s", "500ms"; a bare number is milliseconds)."""
    if value is None:
        return DEFAULT_MAX_TRIGGER_DELAY_MS
    found = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", value.lower())
    if found is None:
        raise InvalidArgumentError(name, f"{value!r}: a duration such as 30s, 5m or 500ms")
    return int(found[1]) * _DURATION_MS[found[2] or "ms"]


def _percentile(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 <= number <= 100:
        raise InvalidArgumentError(name, f"{value!r}: a percentile from 0 (off) to 100")
    return number


def _boolean(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidArgumentError(name, f"{value!r}: true or false")
    return lowered == "true"
