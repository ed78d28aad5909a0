"""Two replicas against one API server: the leader serves and writes, the follower keeps a
warm cache and answers ``Error``; leadership moves with the Lease."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aiohttp
import pytest

from hami_kube.timefmt import format_microtime
from hami_kubesim.testing import RunningApiServer, running_apiserver
from hami_protocol import keys
from hami_scheduler.app import RunningScheduler
from hami_scheduler.leader import holder_is
from hami_scheduler.settings import LeaderElectSettings

from ..service_helpers import (
    Harness,
    container,
    eventually,
    gpu_limits,
    gpus,
    labels_of,
    pod_object,
    scheduler_on,
)

pytestmark = pytest.mark.timeout(60)

LEASE = {"namespace": "kube-system", "name": "hami-scheduler"}


def lease(holder: str, duration: int = 15) -> dict[str, object]:
    now = format_microtime(datetime.now(UTC))
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": dict(LEASE),
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": now,
            "renewTime": now,
        },
    }


async def set_holder(sim: RunningApiServer, holder: str, duration: int = 15) -> None:
    current = sim.server.try_get("leases", LEASE["name"], namespace=LEASE["namespace"])
    if current is None:
        await sim.server.create("leases", lease(holder, duration))
        return
    await sim.server.patch(
        "leases",
        LEASE["name"],
        {"spec": lease(holder, duration)["spec"]},
        namespace=LEASE["namespace"],
        patch_type="merge",
    )


@contextlib.asynccontextmanager
async def replica(
    sim: RunningApiServer, identity: str, mode: str = "follow", **election: float
) -> AsyncIterator[RunningScheduler]:
    await sim.server.create(
        "pods", pod_object(identity, container(), namespace="kube-system", scheduler="x")
    )
    settings = LeaderElectSettings(
        enabled=True,
        mode=mode,
        identity=identity,
        **election,  # type: ignore[arg-type]
    )
    async with scheduler_on(
        sim, leader=settings, pod_name=identity, pod_namespace="kube-system"
    ) as running:
        yield running


def role(sim: RunningApiServer, identity: str) -> str | None:
    pod = sim.server.get("pods", identity, namespace="kube-system")
    return labels_of(pod).get(keys.SCHEDULER_ROLE_LABEL)


def test_holder_matching() -> None:
    assert holder_is("sched-a", "sched-a")
    assert holder_is("sched-a_0d3c", "sched-a")
    assert not holder_is("sched-ab_0d3c", "sched-a")
    assert not holder_is("", "")


async def test_follow_mode_serves_on_the_leader_only_and_moves_with_the_lease() -> None:
    async with (
        running_apiserver() as sim,
        replica(sim, "sched-a") as a,
        replica(sim, "sched-b") as b,
        aiohttp.ClientSession() as http,
    ):
        ha, hb = Harness(sim, a, http), Harness(sim, b, http)
        await eventually(lambda: role(sim, "sched-b") == "follower", what="follower label")
        await set_holder(sim, "sched-a_1f2e")
        await eventually(lambda: a.leadership.is_leader, what="a leads")
        await eventually(lambda: role(sim, "sched-a") == "leader", what="leader label")
        assert not b.leadership.is_leader
        await ha.add_node("n", gpus("n", 2))
        await ha.synced_node("n")
        await hb.synced_node("n")  # the follower's cache is warm too
        pod = await ha.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
        refused = await hb.filter(pod, ["n"])
        assert refused["Error"] == "not the leader; leader is sched-a_1f2e"
        assert await hb.bind(pod, "n") == "not the leader; leader is sched-a_1f2e"
        uid = pod["metadata"]["uid"]
        assert (await ha.filter(pod, ["n"]))["NodeNames"] == ["n"]
        # The filter writes nothing: the follower learns of the decision from the Binding.
        assert a.cache.holding(uid) is not None
        assert b.cache.holding(uid) is None
        # kube-scheduler's leadership moves to the other pod: so does ours.
        await set_holder(sim, "sched-b_9a8b")
        await eventually(lambda: b.leadership.is_leader, what="b leads")
        await eventually(lambda: not a.leadership.is_leader, what="a follows")
        await eventually(lambda: role(sim, "sched-b") == "leader", what="b labelled")
        await eventually(lambda: role(sim, "sched-a") == "follower", what="a labelled")
        # The new leader kept no decision for the pod: it reads the pod and decides.
        assert await hb.bind(pod, "n") == ""
        assert (await ha.filter(pod, ["n"]))["Error"] == "not the leader; leader is sched-b_9a8b"
        # Both replicas count what the Binding carried; the old leader's kept decision is gone.
        for replica_cache, filters in ((a.cache, a.filters), (b.cache, b.filters)):
            await eventually(
                lambda c=replica_cache: c.holding(uid) is not None and c.assumed_count() == 0,
                what="the bound pod counted",
            )
            assert len(filters.pending) == 0


async def test_follow_mode_stops_leading_when_the_lease_is_not_renewed() -> None:
    async with running_apiserver() as sim, replica(sim, "sched-a") as a:
        await set_holder(sim, "sched-a", duration=1)
        await eventually(lambda: a.leadership.is_leader, what="leads")
        await eventually(lambda: not a.leadership.is_leader, within=10, what="lease expired")


async def test_campaign_mode_elects_one_and_fails_over_on_release() -> None:
    timing = {"lease_duration_s": 3.0, "renew_deadline_s": 2.0, "retry_period_s": 0.2}
    async with running_apiserver() as sim, replica(sim, "sched-b", "campaign", **timing) as b:
        async with replica(sim, "sched-a", "campaign", **timing) as a:
            await eventually(
                lambda: a.leadership.is_leader != b.leadership.is_leader, what="one leader"
            )
            first, second = (a, b) if a.leadership.is_leader else (b, a)
            assert second.leadership.leader == first.leadership.leader
        # "a" stopped (releasing the Lease if it held it): "b" leads.
        await eventually(lambda: b.leadership.is_leader, within=15, what="b takes over")
