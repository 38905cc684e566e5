"""Publishing an event and returning once this instance has applied it (Kafka's
ProducerManager, with its waitTillConsumptionCatchesUp).

Kafka's manager waits until its consumer has read the record back. Here an
acknowledged write whose offset is the next one to apply is applied from the
bytes this instance sent, as the consumer would apply them, and the consumer
skips it later; a write behind records not consumed yet (another instance's)
waits for them. The store sees every record once, in offset order, either way,
and a write returns after its acknowledgement instead of a consumer fetch later
(one wait of `consumer.fetch.max.wait.ms` on brokers that answer a fetch only
when its wait ends, as Tansu does). An event the store dropped on the way (a
concurrent writer won) is reported as INVALID_STATE_TRANSITION, not as success.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from remotelog.core.deadline import current_deadline
from remotelog.core.errors import InvalidStateTransitionError, MetadataTopicUnavailableError
from remotelog.core.metadata_keys import record_key, tombstone_keys
from remotelog.core.metadata_serde import serialize
from remotelog.core.metrics import METADATA_WRITE_LATENCY, histogram
from remotelog.core.model import RemoteLogMetadata
from remotelog.metadata.partition_store import RemotePartitionMetadataStore

log = logging.getLogger(__name__)


class Publisher(Protocol):
    """The metadata producer (topic.MetadataProducer): the offset a record was written at.
    A None value is a tombstone; a None key, an unkeyed record."""

    async def publish(
        self, partition: int, value: bytes | None, key: bytes | None = None
    ) -> int: ...


class ProducerManager:
    def __init__(
        self,
        producer: Publisher,
        store: RemotePartitionMetadataStore,
        *,
        consume_wait_ms: int,
        scope: str,
        keyed: bool = False,
    ) -> None:
        self.producer = producer
        # KIP-1266: records under their RemoteLogSegmentMetadataKey, and tombstones.
        self.keyed = keyed
        self.store = store
        self.consume_wait_ms = consume_wait_ms
        self._write_latency = histogram(scope, METADATA_WRITE_LATENCY)

    async def publish(self, metadata_part: int, event: RemoteLogMetadata) -> None:
        """Write `event` to `metadata_part`, within `consume.wait.ms` (or the call's own
        deadline, if sooner), and return once this instance has applied it."""
        started = time.perf_counter()
        wait_s = self.consume_wait_ms / 1000
        deadline = current_deadline()
        if deadline is not None:
            wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
        value = serialize(event)
        topic = self.store.topic_name
        try:
            async with asyncio.timeout(wait_s):
                key = record_key(event) if self.keyed else None
                offset = await self.producer.publish(metadata_part, value, key)
                dropped = await self.store.consumed(metadata_part, offset, value)
        except TimeoutError:
            raise MetadataTopicUnavailableError(
                f"{topic}-{metadata_part} did not confirm the write within "
                f"{wait_s * 1000:.0f} ms (remote.log.metadata.consume.wait.ms); it may still "
                "land: retry"
            ) from None
        finally:
            self._write_latency.record((time.perf_counter() - started) * 1000)
        if dropped is not None:
            raise InvalidStateTransitionError(f"the event was not applied: {dropped}")
        if self.keyed:
            await self._tombstone(metadata_part, event)

    async def _tombstone(self, metadata_part: int, event: RemoteLogMetadata) -> None:
        """Tombstones of what `event` made obsolete. The event is applied already: one
        that does not land only leaves compaction a record more to keep."""
        for key in tombstone_keys(event):
            try:
                await self.producer.publish(metadata_part, None, key)
            except MetadataTopicUnavailableError as exc:
                log.warning("a tombstone of %s was not written: %s", type(event).__name__, exc)
                return
