"""What the preemption does to a victim, through the API server: the ``DisruptionTarget``
condition, the graceful DELETE and the ``Preempted`` Event; the victim keeps its node, for the
scheduling loop too, until its kubelet finishes the deletion; ``status.nominatedNodeName``.

The node's kubelet stand-in is registered but not started, so a deleted victim stays marked
until the test deletes it with grace 0, as that kubelet would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hami_kube.events import EventRecorder
from hami_kube.objects import PodView
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient
from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.scheduler.config import parse_scheduler_config
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.scheduler.victims import clear_nomination, preempt_victim
from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver

pytestmark = [pytest.mark.looptime, pytest.mark.timeout(60)]

NODE = "node-a"
PREEMPTOR_UID = "0b5e7a8e-1111-4222-8333-444455556666"


@pytest.fixture
async def sim(plugin_dir: Path) -> AsyncIterator[RunningApiServer]:
    """An API server with ``NODE`` (1 CPU) and its kubelet stand-in registered, not started."""
    async with running_apiserver() as running:
        spec = NodeSpec(
            name=NODE,
            address="10.1.2.3",
            pod_cidr="10.244.7.0/24",
            capacity={"cpu": "1", "memory": "4Gi", "pods": "110"},
            allocatable={"cpu": "1", "memory": "4Gi", "pods": "110"},
        )
        await running.server.create("nodes", spec.to_object())
        await running.server.patch(
            "nodes", NODE, {"status": spec.status()}, patch_type="merge", subresource="status"
        )
        running.server.kubelets[NODE] = KubeletStandIn(
            KubeletSettings(
                node_name=NODE, plugin_dir=plugin_dir, api_url=running.url, pod_cidr=spec.pod_cidr
            )
        )
        running.server.delete_pods_gracefully()
        yield running


def running_pod(name: str, cpu: str = "1") -> dict[str, Any]:
    stamp = "2024-01-01T00:00:00Z"
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
                {"type": "Ready", "status": "True", "lastTransitionTime": stamp},
            ],
        },
    }


def preemptor() -> PodView:
    return PodView(
        {
            "metadata": {"name": "urgent", "namespace": "default", "uid": PREEMPTOR_UID},
            "spec": {"schedulerName": "hami-scheduler", "priority": 1000},
        }
    )


async def test_a_victim_is_marked_deleted_and_told(sim: RunningApiServer, kube: KubeClient) -> None:
    victim = PodView(sim.server.restore("pods", running_pod("low")))
    events = EventRecorder(kube, component="default-scheduler")
    assert await preempt_victim(kube, events, victim, preemptor=preemptor(), node=NODE)
    stored = sim.server.get("pods", "low", namespace="default")
    assert stored["metadata"]["deletionGracePeriodSeconds"] == 30  # the pod's own
    assert [c["type"] for c in stored["status"]["conditions"]] == [
        "PodScheduled",
        "Ready",
        "DisruptionTarget",
    ]
    target = stored["status"]["conditions"][2]
    assert {
        k: v for k, v in target.items() if k not in ("lastTransitionTime", "lastProbeTime")
    } == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "hami-scheduler: preempting to accommodate a higher priority pod",
    }
    [event] = sim.server.list("events", namespace="default")
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal",
        "Preempted",
        f"Preempted by pod {PREEMPTOR_UID} on node {NODE}",
    )
    assert event["involvedObject"]["uid"] == victim.uid
    # Already being deleted: nothing more is sent.
    marked = PodView(stored)
    assert not await preempt_victim(kube, events, marked, preemptor=preemptor(), node=NODE)
    assert len(sim.server.list("events", namespace="default")) == 1
    # Gone: nothing to do either.
    await kube.delete(PODS, "low", namespace="default", grace_period_seconds=0)
    assert not await preempt_victim(kube, events, victim, preemptor=preemptor(), node=NODE)


async def test_the_victim_holds_its_node_until_its_kubelet_is_done(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    victim = PodView(sim.server.restore("pods", running_pod("low")))
    config = parse_scheduler_config(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    )
    async with SchedulingLoop(config, api_url=sim.url) as loop:
        events = EventRecorder(kube, component="default-scheduler")
        await preempt_victim(kube, events, victim, preemptor=preemptor(), node=NODE)
        await sim.server.create(
            "pods",
            {
                "metadata": {"name": "high"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}
                    ]
                },
            },
            namespace="default",
        )

        def scheduled_condition() -> dict[str, Any] | None:
            pod = sim.server.get("pods", "high", namespace="default")
            conditions = pod["status"].get("conditions") or []
            return next((c for c in conditions if c["type"] == "PodScheduled"), None)

        await eventually(lambda: scheduled_condition() is not None)
        condition = scheduled_condition()
        assert condition is not None
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert "Insufficient cpu" in condition["message"]
        # The kubelet's last word: the victim is gone, and its CPU with it.
        await kube.delete(PODS, "low", namespace="default", uid=victim.uid, grace_period_seconds=0)
        await eventually(
            lambda: (
                sim.server.get("pods", "high", namespace="default")["spec"].get("nodeName") == NODE
            ),
            within=30,
        )
        assert loop.stats.scheduled == 1


async def test_nominated_node_name_through_the_status(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    core = client.CoreV1Api(sim.api_client())
    await core.create_namespaced_pod(
        "default",
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
    )
    await core.patch_namespaced_pod_status("p", "default", {"status": {"nominatedNodeName": NODE}})
    # Kept by other status writes, and selectable.
    await core.patch_namespaced_pod_status(
        "p",
        "default",
        {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}},
    )
    listed = await core.list_namespaced_pod(
        "default", field_selector=f"status.nominatedNodeName={NODE}"
    )
    assert [p.metadata.name for p in listed.items] == ["p"]
    with pytest.raises(ApiException) as info:
        await core.patch_namespaced_pod_status(
            "p", "default", {"status": {"nominatedNodeName": "Not_A_Node"}}
        )
    assert info.value.status == 422
    pod = PodView(sim.server.get("pods", "p", namespace="default"))
    assert await clear_nomination(kube, pod)
    assert "nominatedNodeName" not in sim.server.get("pods", "p", namespace="default")["status"]
    pod = PodView(sim.server.get("pods", "p", namespace="default"))
    assert not await clear_nomination(kube, pod)
    # Binding clears a nomination too.
    await core.patch_namespaced_pod_status("p", "default", {"status": {"nominatedNodeName": NODE}})
    await sim.server.bind("default", "p", NODE)
    assert "nominatedNodeName" not in sim.server.get("pods", "p", namespace="default")["status"]
