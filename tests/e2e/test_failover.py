"""Leader failover between two extender replicas, and handshake expiry of a silent node.

One system for this module: two scheduler replicas campaigning on a Lease (3 s) behind a front
that routes kube-scheduler's calls to the leader, a short ``--handshake-timeout`` (3 s) and a
kubelet that drops a vanished plugin's resource after 1 s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.metrics import sample_value, scrape
from hami_kubesim.stack.state import Outcome, failed_scheduling, outcome, pod_key
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.services import LEASE
from hami_kubesim.stack.system.settle import settled, until
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, gpu_model_node

pytestmark = pytest.mark.asyncio(loop_scope="module")

SPEC = SystemSpec(
    nodes=(
        gpu_model_node("fo-node-a", "Tesla T4", count=2, memory_mib=15360),
        gpu_model_node("fo-node-b", "NVIDIA A10", count=2, memory_mib=23028),
    ),
    scheduler=SchedulerOptions(
        replicas=2,
        handshake_timeout="3s",
        handshake_interval="500ms",
        node_lock_timeout="5s",
    ),
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replicated() -> AsyncIterator[System]:
    async with running_system(SPEC, kubelet_grace=1.0) as running:
        yield running


async def _runs(system: System, name: str, namespace: str) -> None:
    pod = gpu_pod(name, namespace=namespace, memory_mib=1000)
    await system.create(pod)
    state = await system.wait_for(settled([pod_key(pod)]), within=30, what=f"{name} settles")
    found = state.pod(namespace, name)
    assert found is not None
    assert outcome(state, found) is Outcome.RUNNING, failed_scheduling(state, found)


def _holder(system: System) -> str:
    namespace, name = LEASE
    lease = system.api.get("leases", name, namespace=namespace)
    return str(lease["spec"]["holderIdentity"])


async def test_the_follower_takes_over_when_the_leader_dies(replicated: System) -> None:
    system = replicated
    namespace = "failover"
    await system.ensure_namespace(namespace)
    leader = system.leader()
    assert leader is not None
    assert _holder(system).startswith(leader.name + "_")
    follower = next(s for s in system.schedulers if s is not leader)
    await _runs(system, "under-first-leader", namespace)

    await leader.kill()
    await system.wait_for(
        lambda _: system.leader() is follower,
        within=20,
        what="the follower holds the Lease",
    )
    assert _holder(system).startswith(follower.name + "_")
    await _runs(system, "under-second-leader", namespace)

    # The old leader comes back as a follower; the new leader keeps serving.
    await leader.start()
    await _runs(system, "after-rejoin", namespace)
    assert system.leader() is follower
    assert check_all(system.state()) == ()
    await system.clear_pods(namespace)


async def test_a_silent_node_expires_and_recovers_when_its_plugin_returns(
    replicated: System,
) -> None:
    system = replicated
    namespace = "handshake"
    await system.ensure_namespace(namespace)
    plugin = system.deviceplugins["fo-node-b"]
    a10 = {"nvidia.com/use-gputype": "A10"}
    await plugin.stop()
    try:

        async def unavailable() -> bool:
            leader = system.leader()
            if leader is None:
                return False
            samples = await scrape(leader.spec.metrics_url)
            return (sample_value(samples, "hami_scheduler_unavailable_vendors") or 0) >= 1

        await until(unavailable, within=30, what="the leader marks fo-node-b unavailable")
        await system.create(gpu_pod("waits-for-a10", namespace=namespace, annotations=a10))
        state = await system.wait_for(
            settled([f"{namespace}/waits-for-a10"]),
            within=30,
            what="the pod is reported unschedulable while fo-node-b is silent",
        )
        pod = state.pod(namespace, "waits-for-a10")
        assert pod is not None
        assert outcome(state, pod) is Outcome.UNSCHEDULABLE
        assert "0/2 nodes are available" in failed_scheduling(state, pod)[-1]
    finally:
        await plugin.start()

    state = await system.wait_for(
        lambda s: (
            (p := s.pod(namespace, "waits-for-a10")) is not None
            and outcome(s, p) is Outcome.RUNNING
        ),
        within=30,
        what="the pod runs once fo-node-b reports again",
    )
    running = state.pod(namespace, "waits-for-a10")
    assert running is not None
    assert (running.get("spec") or {}).get("nodeName") == "fo-node-b"
    assert check_all(state) == ()
    await system.clear_pods(namespace)
