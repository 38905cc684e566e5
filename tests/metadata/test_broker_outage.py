"""Apache Kafka killed (SIGKILL) and restarted from its log dir while the metadata
manager writes: UNAVAILABLE within the bound meanwhile, nothing acknowledged lost
or doubled after."""

import asyncio
import contextlib

import pytest
from support.services import loading_state, metadata_config, new_partition
from support.waiting import eventually

from remotelog.core.errors import MetadataTopicUnavailableError
from remotelog.dev.kafka_broker import KafkaBroker
from remotelog.metadata.startup import open_metadata_manager

from .scenarios import COPIED, Seg, metadata_of, update_of

CONSUME_WAIT_MS = 1500


@pytest.fixture
def own_broker(tmp_path):
    """A broker of this test's own: the session's must not be killed."""
    broker = KafkaBroker(tmp_path / "kafka").start()
    yield broker
    broker.stop()


class Writer:
    """Writes segment after segment (add, then COPY_SEGMENT_FINISHED), each retried
    until acknowledged, as the copy scheduler does: the writes are idempotent."""

    def __init__(self, manager, tip) -> None:
        self.manager, self.tip = manager, tip
        self.acknowledged: list = []
        self.unavailable: list[float] = []  # how long each refused write took, in s
        self.stopping = False

    async def run(self) -> None:
        number = 0
        while not self.stopping:
            first = number * 10
            metadata = metadata_of(self.tip, Seg(f"k{number}", first, first + 9, {0: 0}))
            await self._until_acknowledged(self.manager.add_remote_log_segment_metadata, metadata)
            update = update_of(metadata, COPIED)
            await self._until_acknowledged(self.manager.update_remote_log_segment_metadata, update)
            self.acknowledged.append(metadata)
            number += 1

    async def _until_acknowledged(self, write, event) -> None:
        while True:
            began = asyncio.get_running_loop().time()
            try:
                # Far past the bound, so that a hang fails the test and a slow machine passes.
                await asyncio.wait_for(write(event), 30)
                return
            except MetadataTopicUnavailableError:
                self.unavailable.append(asyncio.get_running_loop().time() - began)
                await asyncio.sleep(0.1)


async def test_a_broker_killed_while_the_manager_writes_loses_no_acknowledged_event(
    tmp_path, own_broker
):
    config = metadata_config(
        tmp_path,
        own_broker.bootstrap_servers,
        "outage",
        **{"remote.log.metadata.consume.wait.ms": str(CONSUME_WAIT_MS)},
    )
    manager = await open_metadata_manager(config)
    tip = new_partition("durable")
    await manager.on_partition_leadership_changes([tip], [])
    writer = Writer(manager, tip)
    writing = None
    try:
        await eventually(lambda: manager.is_ready(tip), interval_s=0.01)
        writing = asyncio.create_task(writer.run())
        await eventually(lambda: len(writer.acknowledged) >= 5)
        await asyncio.to_thread(own_broker.kill)
        await eventually(lambda: writer.unavailable, timeout_s=60)
        during_outage = len(writer.acknowledged)
        await asyncio.to_thread(own_broker.start)
        await eventually(lambda: len(writer.acknowledged) >= during_outage + 5, timeout_s=60)
        writer.stopping = True
        await writing
        # Refused within the bound, not hung.
        assert max(writer.unavailable) < CONSUME_WAIT_MS / 1000 + 5
        listed = manager.remote_log_segments(tip)
        assert [m.remote_log_segment_id for m in listed] == [
            m.remote_log_segment_id for m in writer.acknowledged
        ]
        assert {m.state for m in listed} == {COPIED}
    finally:
        writer.stopping = True
        if writing is not None and not writing.done():
            writing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writing
        await manager.close()

    # A fresh instance replaying the topic (no snapshot) finds the same: nothing
    # acknowledged before the kill was lost by the broker's recovery, nothing doubled.
    fresh = await open_metadata_manager(
        metadata_config(tmp_path, own_broker.bootstrap_servers, "fresh")
    )
    try:
        await fresh.on_partition_leadership_changes([tip], [])
        await eventually(
            lambda: fresh.is_ready(tip),
            interval_s=0.01,
            why=lambda: loading_state(fresh, own_broker),
        )
        assert fresh.remote_log_segments(tip) == listed
    finally:
        await fresh.close()
