"""DefaultPreemption in the scheduling loop, end to end: kubesim's API server, the loop and a
fake extender on a real socket that implements the filter and preempt verbs.

The fake extender owns ``example.com/slot`` (``ignoredByScheduler: true``): every node has one
slot, held by any pod on it that asks for one until the pod is gone.  In-tree, such pods fit
anywhere, which is exactly the case kube-scheduler ≤1.37 cannot preempt for.

Each node's kubelet stand-in is registered but not started (graceful deletion on), so a victim
stays Terminating until the test deletes it with grace 0, as its kubelet would: the steps in
between are observable.  Virtual time; no fixed sleeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from hami_kube.objects import PodView
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient
from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.scheduler.config import (
    PreemptionBehaviour,
    SchedulerConfig,
    parse_scheduler_config,
)
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver

pytestmark = [pytest.mark.looptime, pytest.mark.timeout(60)]

SLOT = "example.com/slot"
PRIORITIES = {"low": 1, "mid": 50, "high": 100}


@pytest.fixture
async def sim(plugin_dir: Path) -> AsyncIterator[RunningApiServer]:
    async with running_apiserver() as running:
        for name, value in PRIORITIES.items():
            await running.server.create(
                "priorityclasses",
                {"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": name}, "value": value},
            )
        await running.server.create(
            "priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "metadata": {"name": "high-polite"},
                "value": 100,
                "preemptionPolicy": "Never",
            },
        )
        running.server.delete_pods_gracefully()
        yield running


async def add_node(sim: RunningApiServer, plugin_dir: Path, name: str, cpu: str = "2") -> None:
    resources = {"cpu": cpu, "memory": "4Gi", "pods": "110"}
    spec = NodeSpec(name=name, capacity=resources, allocatable=resources)
    await sim.server.create("nodes", spec.to_object())
    await sim.server.patch(
        "nodes", name, {"status": spec.status()}, patch_type="merge", subresource="status"
    )
    # registered, never started: the test plays its last word on a graceful deletion
    sim.server.kubelets[name] = KubeletStandIn(
        KubeletSettings(node_name=name, plugin_dir=plugin_dir / name, api_url=sim.url)
    )


def running(
    sim: RunningApiServer,
    name: str,
    node: str,
    priority: int,
    *,
    cpu: str = "1",
    slot: bool = False,
    labels: dict[str, str] | None = None,
    started: str = "2026-01-01T00:00:00Z",
) -> PodView:
    """A pod placed and started long ago (stored as found at start-up)."""
    limits = {SLOT: "1"} if slot else {}
    pod = {
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "nodeName": node,
            "schedulerName": "hami-scheduler",
            "priority": priority,
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "resources": {"requests": {"cpu": cpu}, "limits": limits},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "startTime": started,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return PodView(sim.server.restore("pods", pod))


async def pending(
    sim: RunningApiServer, name: str, klass: str, *, cpu: str = "1", slot: bool = False, **spec: Any
) -> PodView:
    limits = {SLOT: "1"} if slot else {}
    pod = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "priorityClassName": klass,
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "resources": {"requests": {"cpu": cpu}, "limits": limits},
                }
            ],
            **spec,
        },
    }
    return PodView(await sim.server.create("pods", pod, namespace="default"))


@dataclass
class SlotExtender:
    """Filter: a node whose slot is held fails (``FailedNodes``).  Preempt: ``preempt`` decides
    (default: echo)."""

    sim: RunningApiServer
    preempt: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    calls: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"filter": [], "preempt": []}
    )

    def slot_holder(self, node: str) -> PodView | None:
        for raw in self.sim.server.list("pods"):
            pod = PodView(raw)
            wants = any(SLOT in c.limits for c in pod.containers)
            if wants and pod.node_name == node:
                return pod
        return None

    async def handle(self, request: web.Request) -> web.Response:
        verb = request.match_info["verb"]
        args = await request.json()
        self.calls[verb].append(args)
        if verb == "filter":
            free = [n for n in args["NodeNames"] if self.slot_holder(n) is None]
            failed = {n: "NoFreeSlot" for n in args["NodeNames"] if n not in free}
            return web.json_response({"NodeNames": free, "FailedNodes": failed, "Error": ""})
        if self.preempt is not None:
            return web.json_response(self.preempt(args))
        return web.json_response({"NodeNameToMetaVictims": args["NodeNameToMetaVictims"]})


@asynccontextmanager
async def serve(extender: SlotExtender) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/x/{verb}", extender.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/x"
    finally:
        await runner.cleanup()


def config(
    url: str | None, behaviour: PreemptionBehaviour = "1.37", *, preempt: bool = True
) -> SchedulerConfig:
    lines = [
        "apiVersion: kubescheduler.config.k8s.io/v1",
        "kind: KubeSchedulerConfiguration",
        "profiles: [{schedulerName: hami-scheduler}]",
    ]
    if url is not None:
        lines += [
            "extenders:",
            f"- urlPrefix: {url}",
            "  filterVerb: filter",
            *(["  preemptVerb: preempt"] if preempt else []),
            "  nodeCacheCapable: true",
            f"  managedResources: [{{name: {SLOT}, ignoredByScheduler: true}}]",
        ]
    parsed = parse_scheduler_config("\n".join(lines) + "\n")
    return dataclasses.replace(parsed, preemption_behaviour=behaviour)


def failed_scheduling(sim: RunningApiServer, pod: str) -> list[str]:
    return [
        e["message"]
        for e in sim.server.list("events", namespace="default")
        if e["involvedObject"]["name"] == pod and e["reason"] == "FailedScheduling"
    ]


async def wait_message(sim: RunningApiServer, pod: str, text: str) -> None:
    await eventually(
        lambda: any(text in m for m in failed_scheduling(sim, pod)),
        within=30,
        what=f"FailedScheduling of {pod} saying {text!r}",
    )


def stored(sim: RunningApiServer, name: str) -> PodView | None:
    raw = sim.server.try_get("pods", name, namespace="default")
    return None if raw is None else PodView(raw)


def deleting(sim: RunningApiServer, name: str) -> bool:
    pod = stored(sim, name)
    return pod is not None and pod.deleting


async def kubelet_finishes(kube: KubeClient, pod: PodView) -> None:
    """The victim's kubelet confirms: DELETE with grace 0."""
    await kube.delete(PODS, pod.name, namespace="default", uid=pod.uid, grace_period_seconds=0)


def nominated(sim: RunningApiServer, name: str) -> str:
    pod = stored(sim, name)
    return pod.nominated_node_name if pod else ""


def node_of(sim: RunningApiServer, name: str) -> str:
    pod = stored(sim, name)
    return pod.node_name if pod else ""


# -- ≤1.37 against ≥1.38 ---------------------------------------------------------------------


async def test_up_to_1_37_zero_in_tree_victims_is_an_error_and_the_extender_is_not_asked(
    sim: RunningApiServer, plugin_dir: Path
) -> None:
    await add_node(sim, plugin_dir, "n1")
    running(sim, "holder", "n1", 1, slot=True)
    extender = SlotExtender(sim)
    async with serve(extender) as url, SchedulingLoop(config(url), api_url=sim.url):
        await pending(sim, "urgent", "high", slot=True)
        await wait_message(sim, "urgent", "preemption")
    assert failed_scheduling(sim, "urgent")[-1] == (
        "0/1 nodes are available: 1 NoFreeSlot. "
        'preemption: expected at least one victim pod on node "n1".'
    )
    assert extender.calls["preempt"] == []
    assert not deleting(sim, "holder")
    assert nominated(sim, "urgent") == ""


async def test_from_1_38_the_extender_gets_the_empty_candidate_and_adds_the_victim(
    sim: RunningApiServer, kube: KubeClient, plugin_dir: Path
) -> None:
    await add_node(sim, plugin_dir, "n1")
    holder = running(sim, "holder", "n1", 1, slot=True)

    def add_victim(args: dict[str, Any]) -> dict[str, Any]:
        victims = args["NodeNameToMetaVictims"]
        return {
            "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": holder.uid}], "NumPDBViolations": 0} for node in victims
            }
        }

    extender = SlotExtender(sim, preempt=add_victim)
    async with serve(extender) as url, SchedulingLoop(config(url, "1.38"), api_url=sim.url) as loop:
        urgent = await pending(sim, "urgent", "high", slot=True)
        await eventually(lambda: nominated(sim, "urgent") == "n1", what="urgent nominated to n1")
        (call,) = extender.calls["preempt"]
        assert call["NodeNameToVictims"] is None
        assert call["NodeNameToMetaVictims"] == {"n1": {"Pods": [], "NumPDBViolations": 0}}
        assert call["Pod"]["metadata"]["uid"] == urgent.uid
        # the victim: DisruptionTarget, graceful deletion, Preempted
        victim = stored(sim, "holder")
        assert victim is not None
        assert victim.deleting
        condition = victim.condition("DisruptionTarget")
        assert condition is not None
        assert condition["reason"] == "PreemptionByScheduler"
        # a successful preemption leaves the plain FitError as the event
        assert failed_scheduling(sim, "urgent")[0] == "0/1 nodes are available: 1 NoFreeSlot."
        # the loop keeps what it did, for the invariant checker
        (record,) = loop.preemptions.records()
        assert (record.preemptor_uid, record.node) == (urgent.uid, "n1")
        assert [PodView(v).uid for v in record.victims] == [holder.uid]
        assert [PodView(p).uid for p in record.on_node] == [holder.uid]
        assert record.node_object is not None
        assert record.nominated == ()
        # retried while the victim terminates: waits, nomination kept
        await kube.patch(
            PODS, "urgent", {"metadata": {"labels": {"poke": "1"}}}, namespace="default"
        )
        await wait_message(
            sim, "urgent", "not eligible due to a terminating pod on the nominated node."
        )
        assert nominated(sim, "urgent") == "n1"
        assert node_of(sim, "urgent") == ""
        await kubelet_finishes(kube, victim)
        await eventually(lambda: node_of(sim, "urgent") == "n1", what="urgent bound to n1")
        assert loop.stats.scheduled == 1
    assert len(extender.calls["preempt"]) == 1


async def test_from_1_38_without_a_preempt_verb_no_victims_is_unresolvable(
    sim: RunningApiServer, plugin_dir: Path
) -> None:
    await add_node(sim, plugin_dir, "n1")
    running(sim, "holder", "n1", 1, slot=True)
    extender = SlotExtender(sim)
    async with (
        serve(extender) as url,
        SchedulingLoop(config(url, "1.38", preempt=False), api_url=sim.url),
    ):
        await pending(sim, "urgent", "high", slot=True)
        await wait_message(sim, "urgent", "preemption")
    assert failed_scheduling(sim, "urgent")[-1] == (
        "0/1 nodes are available: 1 NoFreeSlot. preemption: 0/1 nodes are available: "
        "1 No preemption victims found for incoming pod.."
    )


# -- the extender's say ----------------------------------------------------------------------


async def test_the_extender_drops_a_node_and_the_other_is_chosen(
    sim: RunningApiServer, plugin_dir: Path
) -> None:
    for node in ("n1", "n2"):
        await add_node(sim, plugin_dir, node, cpu="1")
    # n1's victim would win the pick (lower priority); the extender vetoes n1
    running(sim, "cheap", "n1", 1)
    running(sim, "dear", "n2", 40)

    def only_n2(args: dict[str, Any]) -> dict[str, Any]:
        victims = args["NodeNameToMetaVictims"]
        assert set(victims) == {"n1", "n2"}
        return {"NodeNameToMetaVictims": {"n2": victims["n2"]}}

    extender = SlotExtender(sim, preempt=only_n2)
    async with serve(extender) as url, SchedulingLoop(config(url), api_url=sim.url):
        await pending(sim, "urgent", "high", slot=True)
        await eventually(lambda: nominated(sim, "urgent") == "n2", what="urgent nominated to n2")
    assert deleting(sim, "dear")
    assert not deleting(sim, "cheap")


async def test_unknown_victims_from_the_extender_end_the_preemption(
    sim: RunningApiServer, plugin_dir: Path
) -> None:
    await add_node(sim, plugin_dir, "n1", cpu="1")
    running(sim, "low", "n1", 1)
    extender = SlotExtender(
        sim, preempt=lambda _: {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "nope"}]}}}
    )
    async with serve(extender) as url, SchedulingLoop(config(url), api_url=sim.url):
        await pending(sim, "urgent", "high", slot=True)
        await wait_message(sim, "urgent", "preemption")
    assert failed_scheduling(sim, "urgent")[-1] == (
        f"0/1 nodes are available: 1 Insufficient cpu. preemption: extender: {url} claims to "
        "preempt pod (UID: &{nope}) on node: n1, but the pod is not found on that node."
    )
    assert not deleting(sim, "low")


# -- in-tree ranking, policy, nominations ----------------------------------------------------


async def test_a_pdb_protected_victim_is_spared_for_a_node_without_violations(
    sim: RunningApiServer, plugin_dir: Path
) -> None:
    for node in ("n1", "n2"):
        await add_node(sim, plugin_dir, node, cpu="1")
    # n1's victim has the lower priority but its budget allows no disruption
    running(sim, "guarded", "n1", 1, labels={"app": "db"})
    running(sim, "plain", "n2", 10)
    await sim.server.create(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
        namespace="default",
    )
    await sim.server.patch(
        "poddisruptionbudgets",
        "db",
        {
            "status": {
                "disruptionsAllowed": 0,
                "currentHealthy": 1,
                "desiredHealthy": 1,
                "expectedPods": 1,
            }
        },
        namespace="default",
        patch_type="merge",
        subresource="status",
    )
    async with SchedulingLoop(config(None), api_url=sim.url):
        await pending(sim, "urgent", "high")
        await eventually(lambda: nominated(sim, "urgent") == "n2", what="urgent nominated to n2")
    assert deleting(sim, "plain")
    assert not deleting(sim, "guarded")


async def test_preemption_policy_never_preempts_nothing(
    sim: RunningApiServer, plugin_dir: Path
) -> None:
    await add_node(sim, plugin_dir, "n1", cpu="1")
    running(sim, "low", "n1", 1)
    async with SchedulingLoop(config(None), api_url=sim.url):
        polite = await pending(sim, "polite", "high-polite")
        assert polite.spec["preemptionPolicy"] == "Never"
        await wait_message(sim, "polite", "preemption")
    assert failed_scheduling(sim, "polite")[-1] == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: not eligible due to preemptionPolicy=Never.."  # upstream's own "."
    )
    assert not deleting(sim, "low")


async def test_a_nomination_holds_the_room_until_the_preemptor_is_deleted(
    sim: RunningApiServer, kube: KubeClient, plugin_dir: Path
) -> None:
    await add_node(sim, plugin_dir, "n1", cpu="1")
    low = running(sim, "low", "n1", 1)
    async with SchedulingLoop(config(None), api_url=sim.url) as loop:
        await pending(sim, "urgent", "high")
        await eventually(lambda: nominated(sim, "urgent") == "n1", what="urgent nominated")
        assert loop.nominations() == {"default/urgent": "n1"}
        assert deleting(sim, "low")
        # a mid-priority pod cannot take the room being freed for the nominated one
        await pending(sim, "middle", "mid")
        await wait_message(sim, "middle", "preemption")
        assert failed_scheduling(sim, "middle")[-1] == (
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
            "1 Insufficient cpu.."
        )
        # the preemptor goes away before the room is free: its nomination goes with it
        await kube.delete(PODS, "urgent", namespace="default")
        await eventually(lambda: loop.nominations() == {}, what="the nomination dropped")
        await kubelet_finishes(kube, low)
        await eventually(lambda: node_of(sim, "middle") == "n1", what="middle bound to n1")
