"""KIP-405 metadata scenarios as event sequences with the answers Kafka's cache gives.

Each scenario is a list of steps: events (add a segment, move it to a state)
and expectations (which segment `remoteLogSegmentMetadata(epoch, offset)`
returns, `highestOffsetForEpoch`, the listing order, `remoteLogSize`). The
same scenarios run against the bare cache and through the gRPC service on a
real broker. Segment ids are fixed (name order = id order), so listings of
segments with equal start offsets have one right order.

Sources: Kafka's RemoteLogSegmentLifecycleTest and RemoteLogLeaderEpochState
comments (duplicate and overlapping uploads after a leader change), and
KIP-405's sections on follower fetch and unclean leader election.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from remotelog.core.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from remotelog.core.states import RemoteLogSegmentState

COPY_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
COPIED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETING = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


@dataclass(frozen=True)
class Seg:
    name: str
    start: int
    end: int
    epochs: dict[int, int]
    size: int = 1000
    txn_index_empty: bool = True


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: list[tuple] = field(default_factory=list)

    @property
    def expectations(self) -> int:
        return sum(1 for step in self.steps if step[0] not in ("add", "update"))


def add(seg: Seg, then: RemoteLogSegmentState | None = COPIED) -> list[tuple]:
    """Add a segment (COPY_SEGMENT_STARTED) and, by default, finish its copy."""
    steps: list[tuple] = [("add", seg)]
    if then is not None:
        steps.append(("update", seg.name, then))
    return steps


def lookup(epoch: int, offset: int, name: str | None) -> tuple:
    return ("lookup", epoch, offset, name)


def highest(epoch: int, offset: int | None) -> tuple:
    return ("highest", epoch, offset)


def listing(epoch: int | None, names: list[str]) -> tuple:
    return ("list", epoch, names)


def size(epoch: int, total: int) -> tuple:
    return ("size", epoch, total)


def txn(epoch: int, offset: int, name: str | None) -> tuple:
    return ("txn", epoch, offset, name)


S0 = Seg("s0", 0, 100, {0: 0, 1: 20, 2: 80})
S1 = Seg("s1", 101, 200, {2: 101})
S2 = Seg("s2", 201, 300, {2: 201, 3: 240})
S3 = Seg("s3", 250, 400, {3: 250, 4: 370})

LIFECYCLE = Scenario(
    "lifecycle across five leader epochs (Kafka's RemoteLogSegmentLifecycleTest)",
    [
        ("add", S0),
        lookup(1, 40, None),  # still being copied
        *(highest(epoch, None) for epoch in range(3)),
        listing(0, ["s0"]),
        ("update", "s0", COPIED),
        *add(S1),
        *add(S2),
        *add(S3),
        lookup(1, 40, "s0"),
        lookup(2, 110, "s1"),
        lookup(3, 240, "s2"),
        lookup(3, 250, "s3"),
        lookup(4, 375, "s3"),
        lookup(1, 110, None),  # epoch 1 ends at 79
        lookup(4, 401, None),  # beyond the last segment
        lookup(5, 301, None),  # unknown epoch
        listing(None, ["s0", "s1", "s2", "s3"]),
        listing(3, ["s2", "s3"]),
        size(2, 3000),
        ("update", "s0", DELETING),
        lookup(0, 10, None),
        listing(0, ["s0"]),  # still listed so the deletion can be retried
        ("update", "s0", DELETED),
        lookup(0, 10, None),
        listing(0, []),
        listing(None, ["s1", "s2", "s3"]),
        # An epoch's highest offset does not go back when segments are deleted.
        highest(0, 19),
        highest(1, 79),
        highest(2, 239),
        highest(3, 369),
        highest(4, 400),
        highest(5, None),
    ],
)

DUPLICATE_UPLOAD = Scenario(
    "a new leader re-uploads a superset of what the old leader copied",
    [
        *add(Seg("a", 0, 100, {0: 0})),
        *add(Seg("b", 0, 200, {0: 0})),
        lookup(0, 50, "b"),
        lookup(0, 150, "b"),
        highest(0, 200),
        listing(0, ["a", "b"]),  # the superseded copy is kept for cleanup
        size(0, 2000),
    ],
)

OVERLAPPING_UPLOAD = Scenario(
    "a new leader's segments overlap the old leader's from an earlier offset",
    [
        *add(Seg("a", 10, 90, {0: 10})),
        *add(Seg("b", 5, 100, {0: 5})),
        *add(Seg("c", 101, 200, {0: 101})),
        lookup(0, 95, "b"),
        lookup(0, 50, "b"),
        lookup(0, 150, "c"),
        listing(0, ["b", "a", "c"]),
        highest(0, 200),
    ],
)

COPY_IN_PROGRESS = Scenario(
    "segments being copied or deleted are listed but never served",
    [
        *add(Seg("a", 0, 50, {0: 0}), then=None),
        lookup(0, 0, None),
        highest(0, None),
        listing(0, ["a"]),
        listing(None, ["a"]),
        size(0, 1000),
        *add(Seg("b", 51, 100, {0: 51}), then=DELETING),  # COPY_STARTED -> DELETE_STARTED
        lookup(0, 60, None),
        listing(None, ["a", "b"]),
        ("update", "a", COPIED),
        lookup(0, 0, "a"),
        lookup(0, 51, None),  # b never finished: no segment holds 51
        highest(0, 50),
    ],
)

FOLLOWER_FETCH = Scenario(
    "KIP-405 follower fetch: a new follower rebuilds its state from the tiered segment "
    "holding the leader's local-log-start-offset - 1",
    [
        *add(Seg("t0", 0, 99, {0: 0})),
        *add(Seg("t1", 100, 199, {0: 100, 1: 150})),
        # Leader's local log starts at 200; the follower looks up 199 in epoch 1.
        lookup(1, 199, "t1"),
        lookup(0, 149, "t1"),
        lookup(0, 150, None),  # epoch 0 ended at 149
        lookup(0, 99, "t0"),
        highest(0, 149),
        highest(1, 199),
        # Retention removed the oldest segment while the follower caught up.
        ("update", "t0", DELETING),
        ("update", "t0", DELETED),
        lookup(0, 50, None),
        lookup(0, 120, "t1"),
        listing(None, ["t1"]),
    ],
)

UNCLEAN_ELECTION = Scenario(
    "KIP-405 unclean leader election: the new leader's lineage diverges in remote storage",
    [
        # Leader A (epoch 0) copies 0-100 and 101-200.
        *add(Seg("a1", 0, 100, {0: 0})),
        *add(Seg("a2", 101, 200, {0: 101})),
        # B had only up to 150 of epoch 0, is elected uncleanly with epoch 1 at
        # 151 and copies its own 101-250.
        *add(Seg("b2", 101, 250, {0: 101, 1: 151})),
        lookup(0, 120, "b2"),  # B's copy replaced A's at epoch 0's offset 101
        lookup(0, 180, None),  # 151-200 of epoch 0 exist only in A's divergent copy
        lookup(1, 200, "b2"),
        lookup(0, 50, "a1"),
        highest(0, 200),  # Kafka keeps the highest ever copied; the copy task caps it
        highest(1, 250),
        listing(0, ["a1", "b2"]),  # a2 is no longer referenced by epoch 0
        listing(None, ["a1", "a2", "b2"]),  # but is still there for retention to delete
        # Remote retention deletes the divergent segment.
        ("update", "a2", DELETING),
        ("update", "a2", DELETED),
        listing(None, ["a1", "b2"]),
        lookup(0, 120, "b2"),
    ],
)

TXN_INDEX = Scenario(
    "KIP-1058: the next segment with aborted transactions, in the epoch or a later one",
    [
        *add(Seg("x0", 0, 99, {0: 0})),
        *add(Seg("x1", 100, 199, {0: 100}, txn_index_empty=False)),
        *add(Seg("x2", 200, 299, {0: 200, 1: 250})),
        *add(Seg("x3", 300, 399, {1: 300}, txn_index_empty=False)),
        txn(0, 0, "x1"),
        txn(0, 150, "x1"),
        txn(0, 200, "x3"),  # nothing more in epoch 0: epoch 1 from its first offset
        txn(1, 260, "x3"),
        txn(1, 400, None),
    ],
)

SCENARIOS = [
    LIFECYCLE,
    DUPLICATE_UPLOAD,
    OVERLAPPING_UPLOAD,
    COPY_IN_PROGRESS,
    FOLLOWER_FETCH,
    UNCLEAN_ELECTION,
    TXN_INDEX,
]


def segment_uuid(name: str, salt: int = 0) -> uuid.UUID:
    """Ids ordered like their names, so tie order in listings is known."""
    return uuid.UUID(int=(int.from_bytes(name.encode().ljust(8, b"\0")[:8], "big") << 64) | salt)


def metadata_of(tip: TopicIdPartition, seg: Seg) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tip, segment_uuid(seg.name)),
        start_offset=seg.start,
        end_offset=seg.end,
        max_timestamp_ms=1_700_000_000_000 + seg.end,
        broker_id=0,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=seg.size,
        segment_leader_epochs=seg.epochs,
        txn_index_empty=seg.txn_index_empty,
    )


def update_of(
    metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=metadata.remote_log_segment_id,
        event_timestamp_ms=1_700_000_000_001,
        custom_metadata=b"copied" if state is COPIED else None,
        state=state,
        broker_id=1,
    )


def name_of(metadata: RemoteLogSegmentMetadata | None) -> str | None:
    if metadata is None:
        return None
    return (metadata.remote_log_segment_id.id.int >> 64).to_bytes(8, "big").rstrip(b"\0").decode()


async def run(scenario: Scenario, tip: TopicIdPartition, target) -> int:
    """Play `scenario` on `target` (async add/update/lookup/highest/list/size/txn) and check.

    Returns how many expectations held (each is asserted as it comes).
    """
    segments: dict[str, RemoteLogSegmentMetadata] = {}
    held = 0
    for number, step in enumerate(scenario.steps):
        kind, *args = step
        where = f"{scenario.name}: step {number} {step!r}"
        if kind == "add":
            (seg,) = args
            segments[seg.name] = metadata_of(tip, seg)
            await target.add(segments[seg.name])
        elif kind == "update":
            name, state = args
            await target.update(update_of(segments[name], state))
        elif kind == "lookup":
            epoch, offset, expected = args
            assert name_of(await target.lookup(tip, epoch, offset)) == expected, where
        elif kind == "highest":
            epoch, expected = args
            assert await target.highest(tip, epoch) == expected, where
        elif kind == "list":
            epoch, expected = args
            assert [name_of(m) for m in await target.list(tip, epoch)] == expected, where
        elif kind == "size":
            epoch, expected = args
            assert await target.size(tip, epoch) == expected, where
        elif kind == "txn":
            epoch, offset, expected = args
            assert name_of(await target.txn(tip, epoch, offset)) == expected, where
        else:
            raise AssertionError(f"unknown step {kind}")
        held += kind not in ("add", "update")
    return held
