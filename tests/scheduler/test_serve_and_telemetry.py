"""`remotelog serve copy-scheduler` and the scheduler's metrics."""

import asyncio
import socket

import pytest
from grpc_health.v1 import health_pb2
from support.services import new_partition
from support.serving import serve_until_sigterm
from support.telemetry import counter, metric_points
from support.waiting import eventually

from remotelog.core import metrics as m
from remotelog.scheduler.server import start_copy_scheduler

from .conftest import Broker, scheduler_config

SERVICE = "remotelog.api.scheduler.v1.CopySchedulerService"
SCOPE = "remotelog.scheduler"


async def test_metrics_report_copies_deletes_lag_and_idle_time(telemetry, fs_stack, tmp_path):
    reader, _ = telemetry
    tip = new_partition("metered")
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(3)
    scheduler = await fs_stack.start_scheduler()
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])

    await eventually(lambda: scheduler.tiered_to(tip, 89))
    sizes = sum(s.size for s in broker.log.segments)
    assert counter(reader, m.REMOTE_COPY_BYTES.name, "metered", SCOPE) == sizes
    assert counter(reader, m.REMOTE_COPY_REQUESTS.name, "metered", SCOPE) == 3
    await scheduler.client.update_log_start_offset(tip, 30)

    async def deleted():
        return counter(reader, m.REMOTE_DELETE_REQUESTS.name, "metered", SCOPE) == 1

    await eventually(deleted)
    lag = [
        p
        for p in metric_points(reader, m.REMOTE_COPY_LAG_SEGMENTS.name)
        if p.attributes["topic"] == "metered"
    ]
    assert [p.value for p in lag] == [0]
    size = [
        p
        for p in metric_points(reader, m.REMOTE_LOG_SIZE_BYTES.name)
        if p.attributes["topic"] == "metered"
    ]
    assert len(size) == 1

    async def counted():  # KIP-963: the segments left, and what sizing them took
        [count] = partition_points(reader, m.REMOTE_LOG_METADATA_COUNT.name, "metered")
        return count.value == 2

    await eventually(counted)
    [took] = partition_points(reader, m.REMOTE_LOG_SIZE_COMPUTATION_TIME.name, "metered")
    assert took.value >= 0
    [idle] = metric_points(reader, m.REMOTE_LOG_MANAGER_TASKS_IDLE.name)
    assert 0 <= idle.value <= 100


def partition_points(reader, name, topic):
    return [p for p in metric_points(reader, name) if p.attributes.get("topic") == topic]


async def test_the_copy_quota_holds_copies_back_and_says_for_how_long(
    telemetry, fs_stack, tmp_path
):
    reader, _ = telemetry

    def throttled_ms():
        return sum(p.sum for p in metric_points(reader, m.REMOTE_COPY_THROTTLE_TIME.name))

    before = throttled_ms()
    tip = new_partition("quota")
    broker = Broker(tmp_path / "broker-0", tip)
    broker.segments(3)
    size = broker.log.segments[0].size
    scheduler = await fs_stack.start_scheduler(
        **{
            # Half a segment a second: each copy after the first waits.
            "remote.log.manager.copy.max.bytes.per.second": str(size // 2),
            "remote.log.manager.copy.quota.window.num": "2",
        }
    )
    await scheduler.client.on_partition_leadership_changes([broker.assignment()])
    await eventually(lambda: scheduler.tiered_to(tip, broker.rolled_end))
    assert counter(reader, m.REMOTE_COPY_REQUESTS.name, "quota", SCOPE) == 3
    assert throttled_ms() - before >= 1000  # two waits of at least half a second


def test_serve_reports_health_and_stops_on_sigterm(fs_stack, tmp_path):
    scheduler_config(
        tmp_path, fs_stack.store.service.port, fs_stack.metadata.service.port, "served"
    )
    status, code, printed = serve_until_sigterm(
        "copy-scheduler", tmp_path / "served.properties", SERVICE
    )
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert code == 0
    assert "shutting down" in printed


async def test_a_start_that_fails_closes_what_it_opened(tmp_path):
    """The listener fails after the scheduler's loops started: they are stopped again."""

    def scheduler_tasks():
        return [t for t in asyncio.all_tasks() if "CopyScheduler" in t.get_coro().__qualname__]

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = scheduler_config(tmp_path, 1, 1, "busy", **{"listen.address": f"127.0.0.1:{port}"})
        with pytest.raises(OSError, match=r"listen\.address: cannot listen"):
            await start_copy_scheduler(config)
    assert scheduler_tasks() == []
