"""Restarts mid-flow: each service, and the kubelet, goes away while pods are on their way.

Pods name ``hami-scheduler`` themselves, so they flow even while the webhook is down (the
configuration's ``failurePolicy: Ignore`` admits them unmutated then). What must hold: pods
submitted once the service is back all run; pods caught in the outage end Running or Failed
with a reason (a kubelet whose device plugin vanished refuses the pod, as a real one does);
nothing is left in flight; the invariants hold.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import Outcome, outcome, pod_key
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.processes import ServiceProcess
from hami_kubesim.stack.system.settle import settled

pytestmark = pytest.mark.asyncio(loop_scope="package")

T4 = {"nvidia.com/use-gputype": "T4"}
SPREAD = {"hami.io/node-scheduler-policy": "spread"}


def _pods(
    namespace: str, prefix: str, count: int, annotations: dict[str, str]
) -> list[dict[str, Any]]:
    pods = []
    for index in range(count):
        pod = gpu_pod(
            f"{prefix}-{index}",
            namespace=namespace,
            memory_mib=1000,
            cores=5,
            annotations=annotations,
        )
        pod["spec"]["schedulerName"] = "hami-scheduler"
        pods.append(pod)
    return pods


async def _create_one_by_one(system: System, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        await system.create(pod)
        await system.wait_for(settled([pod_key(pod)]), within=30, what=f"{pod_key(pod)} settles")


def _service(system: System, which: str) -> ServiceProcess:
    if which == "webhook":
        return system.webhook
    if which == "scheduler":
        return system.schedulers[0]
    return system.deviceplugins["e2e-node-a"]


@pytest.mark.parametrize(
    ("which", "crash"),
    [("webhook", False), ("scheduler", True), ("scheduler", False), ("deviceplugin", True)],
    ids=["webhook-sigterm", "scheduler-sigkill", "scheduler-sigterm", "deviceplugin-sigkill"],
)
async def test_service_restart_mid_flow(system: System, which: str, crash: bool) -> None:
    namespace = f"restart-{which}-{'kill' if crash else 'term'}"
    await system.ensure_namespace(namespace)
    service = _service(system, which)
    starts = service.starts
    # The device plugin's pods must land on its node; the others spread over all nodes, so
    # pods retried together after the outage do not all queue for one node's lock.
    where = T4 if which == "deviceplugin" else SPREAD
    before = _pods(namespace, "before", 2, where)
    during = _pods(namespace, "during", 2, where)
    after = _pods(namespace, "after", 2, where)

    await _create_one_by_one(system, before)
    restart = asyncio.create_task(service.restart(crash=crash), name=f"restart-{which}")
    for pod in during:
        await system.create(pod)
    await restart
    assert service.starts == starts + 1
    assert service.running

    await _create_one_by_one(system, after)
    keys = [pod_key(p) for p in (*before, *during, *after)]
    state = await system.wait_for(settled(keys), within=60, what="every pod settles")
    for pod in after:
        found = state.pod(namespace, pod["metadata"]["name"])
        assert found is not None
        assert outcome(state, found) is Outcome.RUNNING, pod_key(pod)
    for key in keys:
        found = state.pod(*key.split("/"))
        assert found is not None
        assert outcome(state, found) in (Outcome.RUNNING, Outcome.FAILED), key
    assert check_all(state) == ()
    await system.clear_pods(namespace)


async def test_kubelet_restart_makes_the_plugin_register_again(system: System) -> None:
    namespace = "restart-kubelet"
    await system.ensure_namespace(namespace)
    kubelet = system.kubelet("e2e-node-a")
    first = _pods(namespace, "first", 2, T4)
    await _create_one_by_one(system, first)
    registrations = kubelet.registrations.get("nvidia.com/gpu", 0)

    await kubelet.restart()
    await system.wait_for(
        lambda _: (
            kubelet.registrations.get("nvidia.com/gpu", 0) > registrations
            and bool(kubelet.resources().get("nvidia.com/gpu"))
        ),
        within=30,
        what="the device plugin registers with the restarted kubelet",
    )
    second = _pods(namespace, "second", 2, T4)
    await _create_one_by_one(system, second)
    keys = [pod_key(p) for p in (*first, *second)]
    state = await system.wait_for(settled(keys), within=30, what="every pod settles")
    for key in keys:
        found = state.pod(*key.split("/"))
        assert found is not None
        assert outcome(state, found) is Outcome.RUNNING, key
    assert check_all(state) == ()
    await system.clear_pods(namespace)
