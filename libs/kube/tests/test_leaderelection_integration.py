"""Lease leader election against the emulated API server, on virtual time.

Every test runs under ``@pytest.mark.looptime`` (hami_kubesim's plugin): the electors use
client-go's default timings (15 s lease, 10 s renew deadline, 2 s retry period) and judge expiry
by the loop's clock, so a takeover after a crash waits out a real lease duration in virtual time —
deterministic, and no slower than a test with shrunken timings.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from hami_kube import errors
from hami_kube.leaderelection import LeaderElectionConfig, LeaderElector
from hami_kube.resources import LEASES
from hami_kube.rest import KubeClient
from hami_kubesim.testing import RunningApiServer

from .helpers import eventually

pytestmark = pytest.mark.looptime

MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
LEASE_S = 15.0
"""client-go's default leaseDuration (renewDeadline 10 s, retryPeriod 2 s)."""
WAIT_S = 60.0
"""Bound on each wait, in virtual seconds: several lease durations."""


def config(identity: str, **overrides: float | bool) -> LeaderElectionConfig:
    values: dict[str, float | bool] = {
        "lease_duration_s": LEASE_S,
        "renew_deadline_s": 10.0,
        "retry_period_s": 2.0,
    }
    values.update(overrides)
    return LeaderElectionConfig(namespace="kube-system", name="hami", identity=identity, **values)  # type: ignore[arg-type]


def elector(kube: KubeClient, settings: LeaderElectionConfig, **options: Any) -> LeaderElector:
    """An elector that judges expiry by the loop's (virtual) clock."""
    options.setdefault("clock", asyncio.get_running_loop().time)
    return LeaderElector(kube, settings, **options)


async def observe(seconds: float, check: Any) -> None:
    """Assert ``check()`` at every virtual second for ``seconds`` (an invariant over time)."""
    for _ in range(int(seconds)):
        await asyncio.sleep(1.0)
        check()


@asynccontextmanager
async def campaigning(elector: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.run(), name=f"elector-{elector.config.identity}")
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def lease_spec(sim: RunningApiServer) -> dict[str, object]:
    spec = sim.server.get("leases", "hami", namespace="kube-system")["spec"]
    assert isinstance(spec, dict)
    return spec


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_one_leader_then_takeover_after_release(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    started: list[str] = []
    stopped: list[str] = []
    a = elector(
        kube,
        config("a"),
        on_started_leading=lambda: started.append("a"),
        on_stopped_leading=lambda: stopped.append("a"),
    )
    async with campaigning(a) as task_a:
        async with asyncio.timeout(WAIT_S):
            await a.wait_leading()
        b = elector(kube, config("b"), on_started_leading=lambda: started.append("b"))
        async with campaigning(b):
            # b keeps trying for several lease durations and must never win while a renews.
            await eventually(lambda: b.leader == "a", within=WAIT_S, what="b observes a")

            def a_leads() -> None:
                assert a.is_leader
                assert not b.is_leader

            await observe(3 * LEASE_S, a_leads)
            spec = lease_spec(sim)
            assert spec["holderIdentity"] == "a"
            assert spec["leaseTransitions"] == 0
            assert spec["leaseDurationSeconds"] == 15
            assert MICROTIME.match(str(spec["renewTime"]))
            assert MICROTIME.match(str(spec["acquireTime"]))

            task_a.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task_a
            assert not a.is_leader
            # A released lease is free at once: b takes it at its next retry, not after expiry.
            released_at = asyncio.get_running_loop().time()
            async with asyncio.timeout(WAIT_S):
                await b.wait_leading()
            assert asyncio.get_running_loop().time() - released_at < LEASE_S
            spec = lease_spec(sim)
            assert spec["holderIdentity"] == "b"
            assert spec["leaseTransitions"] == 1
            assert spec["leaseDurationSeconds"] == 15
        assert lease_spec(sim)["holderIdentity"] == ""  # b released on cancel
        assert lease_spec(sim)["leaseDurationSeconds"] == 1
    assert started == ["a", "b"]
    assert stopped == ["a"]


async def test_takeover_after_a_crash_waits_for_expiry(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    loop = asyncio.get_running_loop()
    a = elector(kube, config("a", release_on_cancel=False))
    async with campaigning(a) as task_a:
        async with asyncio.timeout(WAIT_S):
            await a.wait_leading()
        task_a.cancel()  # a "crashes": no release
        with pytest.raises(asyncio.CancelledError):
            await task_a
    assert lease_spec(sim)["holderIdentity"] == "a"
    b = elector(kube, config("b"))
    crashed_at = loop.time()
    async with campaigning(b):
        async with asyncio.timeout(WAIT_S):
            await b.wait_leading()
        # b first saw a's lease at once, so it waited a whole lease duration from then.
        waited = loop.time() - crashed_at
        assert LEASE_S <= waited < LEASE_S + 2 * 2.0 * 2.2  # plus at most two jittered retries
    assert not a.is_leader


async def test_expiry_is_judged_by_the_local_observation_clock(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    # A lease whose renewTime is ancient but which this candidate has only just seen.
    await sim.server.create(
        "leases",
        {
            "metadata": {"name": "hami", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": "ghost",
                "leaseDurationSeconds": 2,
                "acquireTime": "2000-01-01T00:00:00.000000Z",
                "renewTime": "2000-01-01T00:00:00.000000Z",
                "leaseTransitions": 4,
            },
        },
    )
    clock = FakeClock()
    moment = datetime(2026, 7, 24, 10, 0, 0, 5, tzinfo=UTC)
    new_leaders: list[str] = []
    b = elector(
        kube, config("b"), clock=clock, now=lambda: moment, on_new_leader=new_leaders.append
    )
    assert not await b.try_acquire_or_renew()
    assert b.leader == "ghost"
    clock.now += 1.9  # the ghost's leaseDurationSeconds (2) counts, not this candidate's
    assert not await b.try_acquire_or_renew()
    clock.now += 0.2
    assert await b.try_acquire_or_renew()
    spec = lease_spec(sim)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 5
    assert spec["acquireTime"] == spec["renewTime"] == "2026-07-24T10:00:00.000005Z"
    assert new_leaders == ["ghost", "b"]

    # Renewal keeps acquireTime and the transition count.
    later = datetime(2026, 7, 24, 10, 0, 1, tzinfo=UTC)
    b_again = elector(kube, config("b"), clock=clock, now=lambda: later)
    assert await b_again.try_acquire_or_renew()
    spec = lease_spec(sim)
    assert spec["acquireTime"] == "2026-07-24T10:00:00.000005Z"
    assert spec["renewTime"] == "2026-07-24T10:00:01.000000Z"
    assert spec["leaseTransitions"] == 5


async def test_free_lease_is_taken_at_once(sim: RunningApiServer, kube: KubeClient) -> None:
    await sim.server.create(
        "leases",
        {
            "metadata": {"name": "hami", "namespace": "kube-system"},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 2},
        },
    )
    b = elector(kube, config("b"), clock=FakeClock())
    assert await b.try_acquire_or_renew()
    assert lease_spec(sim)["leaseTransitions"] == 3


async def test_server_rejects_unconditional_lease_updates(kube: KubeClient) -> None:
    candidate = elector(kube, config("a"))
    assert await candidate.try_acquire_or_renew()
    lease = await kube.get(LEASES, "hami", namespace="kube-system")
    stale = dict(lease, metadata=dict(lease["metadata"]))
    del lease["metadata"]["resourceVersion"]
    with pytest.raises(errors.InvalidError):
        await kube.replace(LEASES, lease)
    assert await candidate.try_acquire_or_renew()  # renews; the RV it held is now outdated
    with pytest.raises(errors.ConflictError):
        await kube.replace(LEASES, stale)
    # The elector copes with someone else's write: its cached copy is stale, the fast path
    # conflicts, and the slow path re-reads and renews.
    await kube.patch(
        LEASES, "hami", {"metadata": {"labels": {"touched": "yes"}}}, namespace="kube-system"
    )
    assert await candidate.try_acquire_or_renew()
    assert (await kube.get(LEASES, "hami", namespace="kube-system"))["spec"][
        "holderIdentity"
    ] == "a"


async def test_leader_steps_down_when_it_cannot_renew(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    a = elector(kube, config("a"), on_stopped_leading=stopped.set)
    async with campaigning(a):
        async with asyncio.timeout(WAIT_S):
            await a.wait_leading()
        sim.server.inject_error("*", "leases", code=500)
        failing_since = loop.time()
        async with asyncio.timeout(WAIT_S):
            await stopped.wait()
        assert not a.is_leader
        # It kept trying until the renew deadline (10 s after its last renewal, at most one
        # retry period before the errors began), then gave up at its next retry.
        assert 10.0 - 2.0 <= loop.time() - failing_since <= 10.0 + 2.0
        sim.server.clear_faults()
        async with asyncio.timeout(WAIT_S):
            await a.wait_leading()


async def test_single_leader_under_injected_errors(sim: RunningApiServer, kube: KubeClient) -> None:
    sim.server.faults.reseed(7)
    sim.server.inject_error("update", "leases", code=500, rate=0.3)
    sim.server.inject_error("get", "leases", code=503, rate=0.2)
    electors = [elector(kube, config(name)) for name in ("a", "b", "c")]
    async with campaigning(electors[0]), campaigning(electors[1]), campaigning(electors[2]):
        await eventually(
            lambda: any(e.is_leader for e in electors), within=WAIT_S, what="someone leads"
        )

        def at_most_one_leader() -> None:
            assert sum(e.is_leader for e in electors) <= 1

        await observe(10 * LEASE_S, at_most_one_leader)


async def test_runs_under_a_task_group_and_releases_on_shutdown(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    candidate = elector(kube, config("a"))

    class ShutdownRequestedError(Exception):
        pass

    async def work_while_leading() -> None:
        await candidate.wait_leading()
        raise ShutdownRequestedError  # a sibling task ends the group; the elector is cancelled

    async def serve() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(candidate.run(), name="leader-election")
            group.create_task(work_while_leading(), name="work")

    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.timeout(WAIT_S):
            await serve()
    assert caught.group_contains(ShutdownRequestedError)
    assert not candidate.is_leader
    assert candidate.not_leading.is_set()
    assert lease_spec(sim)["holderIdentity"] == ""
