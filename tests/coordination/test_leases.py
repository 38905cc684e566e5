"""Leases: one contract, run against the in-process implementation and a real redis-server."""

import asyncio
import contextlib
import signal
import time

import pytest
import pytest_asyncio
from support.servers import RedisServer
from support.waiting import eventually

from remotelog.coordination.held_names import HeldNames
from remotelog.coordination.lease import InProcessLeases, LeaseLostError, held
from remotelog.coordination.redis_leases import RedisLeases
from remotelog.core.errors import ServiceUnavailableError


@pytest_asyncio.fixture(params=["in-process", "redis"])
async def leases(request):
    if request.param == "redis":
        implementation = RedisLeases(request.getfixturevalue("redis_url"))
    else:
        implementation = InProcessLeases()
    yield implementation
    await implementation.close()


def name(request) -> str:
    return f"partition-{request.node.name}-{time.monotonic_ns()}"


async def test_one_holder_at_a_time_and_tokens_grow(leases, request):
    lease_name = name(request)
    assert await leases.holder(lease_name) is None
    first = await leases.acquire(lease_name, "recover on host-a pid 7", 5000)
    assert first is not None
    assert await leases.acquire(lease_name, "b", 5000) is None
    # Who holds it, spaces and all, for a refusal to name.
    assert await leases.holder(lease_name) == "recover on host-a pid 7"
    await leases.release(first)
    assert await leases.holder(lease_name) is None
    second = await leases.acquire(lease_name, "b", 5000)
    assert second is not None
    assert second.fencing_token > first.fencing_token
    assert await leases.holder(lease_name) == "b"


async def test_an_expired_lease_is_taken_over_and_its_holder_learns_it(leases, request):
    lease_name = name(request)
    stale = await leases.acquire(lease_name, "paused", 150)
    await asyncio.sleep(0.3)  # the holder stalls past its ttl
    fresh = await leases.acquire(lease_name, "other", 5000)
    assert fresh is not None
    assert fresh.fencing_token > stale.fencing_token
    assert await leases.renew(stale) is False
    with pytest.raises(LeaseLostError, match="no longer held"):
        stale.check()
    # The stale holder's release does not free the new holder's lease.
    await leases.release(stale)
    assert await leases.acquire(lease_name, "third", 5000) is None
    assert await leases.renew(fresh) is True
    fresh.check()


async def test_held_renews_while_the_body_runs_and_releases_after(leases, request):
    lease_name = name(request)
    # A 400 ms ttl: renewals (every third of it) survive the event-loop stalls
    # of a loaded CI machine; the body outlives the ttl three times over.
    async with held(leases, lease_name, "runner", 400) as lease:
        assert lease is not None
        for _ in range(12):  # 1.2 s
            await asyncio.sleep(0.1)
            assert await leases.acquire(lease_name, "intruder", 5000) is None
        lease.check()
    taken = await leases.acquire(lease_name, "next", 5000)
    assert taken is not None


class SwallowingLeases(InProcessLeases):
    """Renewals that, like redis-py's asyncio client under load, sometimes swallow the
    cancel that lands inside them and carry on."""

    def __init__(self) -> None:
        super().__init__()
        self.renewals = 0
        self.renewing = asyncio.Event()

    async def renew(self, lease):
        self.renewals += 1
        renewed = await super().renew(lease)
        self.renewing.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.2)  # the reply on its way
        return renewed


async def test_held_ends_its_renewals_even_where_a_renewal_swallows_a_cancel():
    leases = SwallowingLeases()
    # The body ends while a renewal (every 100 ms, each 200 ms long) is in flight.
    async with held(leases, "p-0", "runner", 300) as lease:
        await leases.renewing.wait()
    # The renewer finished: nothing renews the lease any more, and it was released.
    renewals = leases.renewals
    await asyncio.sleep(0.2)
    assert leases.renewals == renewals
    assert not lease.lost.is_set()
    assert await leases.acquire("p-0", "next", 5000) is not None


async def test_held_yields_none_when_another_holds_it(leases, request):
    lease_name = name(request)
    owner = await leases.acquire(lease_name, "owner", 5000)
    async with held(leases, lease_name, "late", 5000) as lease:
        assert lease is None
    assert await leases.renew(owner) is True


async def test_concurrent_acquirers_get_exactly_one_grant(leases, request):
    lease_name = name(request)
    grants = await asyncio.gather(
        *(leases.acquire(lease_name, f"instance-{n}", 5000) for n in range(20))
    )
    assert sum(grant is not None for grant in grants) == 1


async def test_redis_killed_and_restarted_is_retriable_and_loses_nothing_held(tmp_path):
    server = RedisServer(tmp_path).start()
    leases = RedisLeases(server.url)
    try:
        async with held(leases, "p-0", "broker-1", ttl_ms=60_000) as lease:
            assert lease is not None
            server.kill()
            # Down: taking a lease is a retriable error, not an unknown fault.
            with pytest.raises(ServiceUnavailableError, match="redis") as raised:
                await leases.acquire("p-1", "broker-1", 60_000)
            assert raised.value.retriable
        # Leaving `held` with Redis down did not raise: the lease expires by its ttl.
        server.start()
        # Back, empty (no persistence): both names are free again.
        taken = await leases.acquire("p-0", "broker-2", 60_000)
        assert taken is not None
        assert taken.owner == "broker-2"
    finally:
        await leases.close()
        server.stop()


async def test_redis_that_hangs_is_a_retriable_error_after_the_timeout(tmp_path):
    server = RedisServer(tmp_path).start()
    leases = RedisLeases(server.url, timeout_s=0.5)
    try:
        owner = await leases.acquire("p-0", "broker-1", 60_000)
        assert owner is not None
        server.process.send_signal(signal.SIGSTOP)  # connections stay open, nothing answers
        try:
            with pytest.raises(ServiceUnavailableError, match="redis") as raised:
                await leases.acquire("p-1", "broker-1", 60_000)
            assert raised.value.retriable
        finally:
            server.process.send_signal(signal.SIGCONT)
        # Answering again: the lease taken before the stall is still held.
        assert await leases.acquire("p-0", "broker-2", 60_000) is None
        assert await leases.renew(owner) is True
    finally:
        await leases.close()
        server.stop()


async def test_holders_lists_the_names_held_under_a_prefix(leases, request):
    prefix = f"{name(request)}:"
    first = await leases.acquire(f"{prefix}a", "run A on host-a", 5000)
    await leases.acquire(f"{prefix}b", "run B", 5000)
    await leases.acquire(f"other-{prefix}c", "run C", 5000)
    assert await leases.holders(prefix) == {f"{prefix}a": "run A on host-a", f"{prefix}b": "run B"}
    await leases.release(first)
    assert await leases.holders(prefix) == {f"{prefix}b": "run B"}


async def test_held_names_answer_at_once_while_redis_hangs_and_forget_after_the_ttl(tmp_path):
    server = RedisServer(tmp_path).start()
    leases = RedisLeases(server.url, timeout_s=0.5)
    names = HeldNames(leases, "recover:", interval_s=0.05, forget_after_s=1.5)
    names.start()
    try:
        assert await leases.acquire("recover:p-0", "run A", 60_000) is not None
        await eventually(lambda: names.holder("recover:p-0") == "run A", timeout_s=5)
        names.hold("recover:p-1", "run B")  # this process's own grant: known at once
        assert names.holder("recover:p-1") == "run B"
        server.process.send_signal(signal.SIGSTOP)
        try:
            # Answered from the last reading, without a call that waits on Redis.
            assert names.holder("recover:p-0") == "run A"
            # Unread for longer than any lease lives unrenewed: nobody holds it any more.
            await eventually(lambda: names.holder("recover:p-0") is None, timeout_s=10)
            assert names.holder("recover:p-1") == "run B"
        finally:
            server.process.send_signal(signal.SIGCONT)
        await eventually(lambda: names.holder("recover:p-0") == "run A", timeout_s=5)
        names.release("recover:p-1")
        assert names.holder("recover:p-1") is None
    finally:
        await names.close()
        await leases.close()
        server.stop()
