"""The removers' progress: consumer-group offsets of the metadata topic, committed in Kafka.

Kept where Kafka keeps a consumer's progress, so every remover instance (with
or without Redis) and every restart sees the same offsets. The group is never
joined: each remover commits only the metadata partitions whose lease it holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from remotelog.core.errors import MetadataTopicUnavailableError

_LIBRDKAFKA_LOG = logging.getLogger("remotelog.remover.librdkafka")
_RETRY_S = 0.2
# What Kafka's own consumer retries while the group coordinator moves or loads.
_COORDINATOR_MOVING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


class Progress(Protocol):
    async def committed(self, partitions: list[int]) -> dict[int, int]:
        """The committed offset of each metadata partition; 0 when none was committed."""

    async def commit(self, partition: int, offset: int) -> None: ...

    async def close(self) -> None: ...


class KafkaGroupProgress:
    def __init__(
        self, client_config: dict[str, Any], *, topic: str, group_id: str, timeout_s: float
    ) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": group_id,
                "client.id": f"remotelog-remover-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "logger": _LIBRDKAFKA_LOG,
            }
        )
        # librdkafka calls block; one thread keeps them in order.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="remover-progress")

    async def _run(self, what: str, fn: Any, *args: Any) -> Any:
        """`fn` in the thread, tried again on what Kafka calls retriable (the group
        coordinator of a new cluster still loading: NOT_COORDINATOR) for timeout_s."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
            except KafkaException as exc:
                error = exc.args[0]
                passing = error.retriable() or error.code() in _COORDINATOR_MOVING
                if not passing or time.monotonic() > deadline:
                    raise MetadataTopicUnavailableError(f"{what} {self.topic}: {exc}") from None
                await asyncio.sleep(_RETRY_S)

    async def committed(self, partitions: list[int]) -> dict[int, int]:
        asked = [KafkaTopicPartition(self.topic, p) for p in partitions]
        found = await self._run(
            "reading committed offsets of", lambda: self._consumer.committed(asked, self.timeout_s)
        )
        return {tp.partition: max(tp.offset, 0) for tp in found}

    async def commit(self, partition: int, offset: int) -> None:
        offsets = [KafkaTopicPartition(self.topic, partition, offset)]
        result = await self._run(
            "committing progress on",
            lambda: self._consumer.commit(offsets=offsets, asynchronous=False),
        )
        for tp in result or ():
            if tp.error is not None:
                raise MetadataTopicUnavailableError(
                    f"committing progress on {self.topic}-{partition}: {tp.error}"
                )

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._consumer.close)
        self._thread.shutdown(wait=True)
