"""Lease leader election against the emulated API server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest

from hami_kube import errors
from hami_kube.leaderelection import LeaderElectionConfig, LeaderElector
from hami_kube.resources import LEASES
from hami_kube.rest import KubeClient
from hami_kubesim.testing import RunningApiServer

from .helpers import eventually

MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def config(identity: str, **overrides: float | bool) -> LeaderElectionConfig:
    values: dict[str, float | bool] = {
        # Generous next to the retry period, so a busy test machine cannot cost a renewal.
        "lease_duration_s": 4.0,
        "renew_deadline_s": 3.0,
        "retry_period_s": 0.1,
    }
    values.update(overrides)
    return LeaderElectionConfig(namespace="kube-system", name="hami", identity=identity, **values)  # type: ignore[arg-type]


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
    a = LeaderElector(
        kube,
        config("a"),
        on_started_leading=lambda: started.append("a"),
        on_stopped_leading=lambda: stopped.append("a"),
    )
    async with campaigning(a) as task_a:
        async with asyncio.timeout(10):
            await a.wait_leading()
        b = LeaderElector(kube, config("b"), on_started_leading=lambda: started.append("b"))
        async with campaigning(b):
            # b keeps trying for a while and must never win while a renews.
            await eventually(lambda: b.leader == "a", what="b observes a")
            for _ in range(20):
                await asyncio.sleep(0.05)
                assert a.is_leader
                assert not b.is_leader
            spec = lease_spec(sim)
            assert spec["holderIdentity"] == "a"
            assert spec["leaseTransitions"] == 0
            assert spec["leaseDurationSeconds"] == 4
            assert MICROTIME.match(str(spec["renewTime"]))
            assert MICROTIME.match(str(spec["acquireTime"]))

            task_a.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task_a
            assert not a.is_leader
            async with asyncio.timeout(10):
                await b.wait_leading()
            spec = lease_spec(sim)
            assert spec["holderIdentity"] == "b"
            assert spec["leaseTransitions"] == 1
            assert spec["leaseDurationSeconds"] == 4
        assert lease_spec(sim)["holderIdentity"] == ""  # b released on cancel
        assert lease_spec(sim)["leaseDurationSeconds"] == 1
    assert started == ["a", "b"]
    assert stopped == ["a"]


async def test_takeover_after_a_crash_waits_for_expiry(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    short = {"lease_duration_s": 2.0, "renew_deadline_s": 1.5}
    a = LeaderElector(kube, config("a", release_on_cancel=False, **short))
    async with campaigning(a) as task_a:
        async with asyncio.timeout(10):
            await a.wait_leading()
        task_a.cancel()  # a "crashes": no release
        with pytest.raises(asyncio.CancelledError):
            await task_a
    assert lease_spec(sim)["holderIdentity"] == "a"
    b = LeaderElector(kube, config("b", **short))
    async with campaigning(b):
        async with asyncio.timeout(10):
            await b.wait_leading()
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
    b = LeaderElector(
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
    b_again = LeaderElector(kube, config("b"), clock=clock, now=lambda: later)
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
    b = LeaderElector(kube, config("b"), clock=FakeClock())
    assert await b.try_acquire_or_renew()
    assert lease_spec(sim)["leaseTransitions"] == 3


async def test_server_rejects_unconditional_lease_updates(kube: KubeClient) -> None:
    elector = LeaderElector(kube, config("a"))
    assert await elector.try_acquire_or_renew()
    lease = await kube.get(LEASES, "hami", namespace="kube-system")
    stale = dict(lease, metadata=dict(lease["metadata"]))
    del lease["metadata"]["resourceVersion"]
    with pytest.raises(errors.InvalidError):
        await kube.replace(LEASES, lease)
    assert await elector.try_acquire_or_renew()  # renews; the RV it held is now outdated
    with pytest.raises(errors.ConflictError):
        await kube.replace(LEASES, stale)
    # The elector copes with someone else's write: its cached copy is stale, the fast path
    # conflicts, and the slow path re-reads and renews.
    await kube.patch(
        LEASES, "hami", {"metadata": {"labels": {"touched": "yes"}}}, namespace="kube-system"
    )
    assert await elector.try_acquire_or_renew()
    assert (await kube.get(LEASES, "hami", namespace="kube-system"))["spec"][
        "holderIdentity"
    ] == "a"


async def test_leader_steps_down_when_it_cannot_renew(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    stopped = asyncio.Event()
    a = LeaderElector(
        kube,
        config("a", lease_duration_s=2.0, renew_deadline_s=1.5),
        on_stopped_leading=stopped.set,
    )
    async with campaigning(a):
        async with asyncio.timeout(10):
            await a.wait_leading()
        sim.server.inject_error("*", "leases", code=500)
        async with asyncio.timeout(10):
            await stopped.wait()
        assert not a.is_leader
        sim.server.clear_faults()
        async with asyncio.timeout(10):
            await a.wait_leading()


async def test_single_leader_under_injected_errors(sim: RunningApiServer, kube: KubeClient) -> None:
    sim.server.faults.reseed(7)
    sim.server.inject_error("update", "leases", code=500, rate=0.3)
    sim.server.inject_error("get", "leases", code=503, rate=0.2)
    electors = [LeaderElector(kube, config(name)) for name in ("a", "b", "c")]
    async with campaigning(electors[0]), campaigning(electors[1]), campaigning(electors[2]):
        await eventually(lambda: any(e.is_leader for e in electors), what="someone leads")
        for _ in range(40):
            await asyncio.sleep(0.025)
            assert sum(e.is_leader for e in electors) <= 1


async def test_runs_under_a_task_group_and_releases_on_shutdown(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    elector = LeaderElector(kube, config("a"))

    class ShutdownRequestedError(Exception):
        pass

    async def work_while_leading() -> None:
        await elector.wait_leading()
        raise ShutdownRequestedError  # a sibling task ends the group; the elector is cancelled

    async def serve() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(elector.run(), name="leader-election")
            group.create_task(work_while_leading(), name="work")

    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.timeout(20):
            await serve()
    assert caught.group_contains(ShutdownRequestedError)
    assert not elector.is_leader
    assert elector.not_leading.is_set()
    assert lease_spec(sim)["holderIdentity"] == ""
