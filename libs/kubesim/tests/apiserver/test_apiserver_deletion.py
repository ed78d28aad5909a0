"""Graceful pod deletion over HTTP: a DELETE marks a pod its kubelet must stop, which keeps it
(and its node) until that kubelet deletes it with grace 0; what the grace period is, and when
a pod goes at once.

The node's kubelet is a real stand-in, registered as ``running_cluster`` registers it; it is
started only where a test wants it to finish the deletion, so the marked state holds until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hami_kube.objects import PodView
from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.kubelet.status import IGNORES_SIGTERM_ANNOTATION, stop_delay
from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver

NODE = "node-a"


@pytest.fixture
async def sim(plugin_dir: Path) -> AsyncIterator[RunningApiServer]:
    """An API server with ``NODE`` and that node's kubelet stand-in registered, not started."""
    async with running_apiserver() as running:
        spec = NodeSpec(name=NODE, address="10.1.2.3", pod_cidr="10.244.7.0/24")
        await running.server.create("nodes", spec.to_object())
        running.server.kubelets[NODE] = KubeletStandIn(
            KubeletSettings(
                node_name=NODE,
                plugin_dir=plugin_dir,
                api_url=running.url,
                pod_cidr=spec.pod_cidr,
                dial_timeout=0.5,
            )
        )
        running.server.delete_pods_gracefully()
        yield running


@pytest.fixture
async def core(sim: RunningApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(sim.api_client())


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "img:1"}], **spec},
    }


async def test_a_pod_waits_for_its_kubelet(sim: RunningApiServer, core: client.CoreV1Api) -> None:
    changes: list[tuple[str, bool]] = []
    sim.server.observe(
        lambda resource, kind, obj: (
            changes.append((kind, bool(obj["metadata"].get("deletionTimestamp"))))
            if resource == "pods"
            else None
        )
    )
    await core.create_namespaced_pod("default", pod("web", nodeName=NODE))
    deleted = await core.delete_namespaced_pod("web", "default")
    assert deleted.metadata.deletion_grace_period_seconds == 30  # the pod's own default
    marked_at = deleted.metadata.deletion_timestamp
    assert timedelta(seconds=29) <= marked_at - deleted.metadata.creation_timestamp
    # Still there, and writable through pods/status (the preemption's condition, say).
    await core.patch_namespaced_pod_status(
        "web",
        "default",
        {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}},
    )
    stored = await core.read_namespaced_pod("web", "default")
    assert stored.metadata.deletion_timestamp == marked_at
    assert [c.type for c in stored.status.conditions] == ["DisruptionTarget"]
    # Deleting again with a longer grace changes nothing; a shorter one brings it forward.
    again = await core.delete_namespaced_pod("web", "default", grace_period_seconds=60)
    assert again.metadata.resource_version == stored.metadata.resource_version
    shorter = await core.delete_namespaced_pod("web", "default", grace_period_seconds=10)
    assert shorter.metadata.deletion_grace_period_seconds == 10
    assert marked_at - shorter.metadata.deletion_timestamp == timedelta(seconds=20)
    # The kubelet comes up, sees the pod marked and finishes its deletion.
    kubelet = sim.server.kubelets[NODE]
    assert isinstance(kubelet, KubeletStandIn)
    async with kubelet:
        await eventually(lambda: sim.server.try_get("pods", "web", namespace="default") is None)
    assert changes == [
        ("ADDED", False),
        ("MODIFIED", True),
        ("MODIFIED", True),
        ("MODIFIED", True),
        ("DELETED", True),
    ]


@pytest.mark.parametrize(
    ("body", "options"),
    [
        pytest.param(pod("p"), {}, id="not scheduled"),
        pytest.param(pod("p", nodeName="elsewhere"), {}, id="node without kubelet"),
        pytest.param(pod("p", nodeName=NODE), {"grace_period_seconds": 0}, id="grace 0"),
        pytest.param(
            pod("p", nodeName=NODE, terminationGracePeriodSeconds=0), {}, id="pod asks for 0"
        ),
    ],
)
async def test_pods_that_go_at_once(
    sim: RunningApiServer, core: client.CoreV1Api, body: dict[str, Any], options: dict[str, Any]
) -> None:
    await core.create_namespaced_pod("default", body)
    await core.delete_namespaced_pod("p", "default", **options)
    with pytest.raises(ApiException) as info:
        await core.read_namespaced_pod("p", "default")
    assert info.value.status == 404


async def test_an_ended_pod_goes_at_once(sim: RunningApiServer, core: client.CoreV1Api) -> None:
    done = pod("done", nodeName=NODE)
    done["status"] = {"phase": "Succeeded"}
    sim.server.restore("pods", done)
    await core.delete_namespaced_pod("done", "default")
    assert sim.server.try_get("pods", "done", namespace="default") is None


async def test_grace_from_the_options(sim: RunningApiServer, core: client.CoreV1Api) -> None:
    await core.create_namespaced_pod("default", pod("a", nodeName=NODE))
    marked = await core.delete_namespaced_pod("a", "default", grace_period_seconds=-5)
    assert marked.metadata.deletion_grace_period_seconds == 1  # negative counts as 1
    await core.create_namespaced_pod("default", pod("b", nodeName=NODE))
    async with (
        aiohttp.ClientSession() as http,
        http.delete(f"{sim.url}/api/v1/namespaces/default/pods/b?gracePeriodSeconds=7") as resp,
    ):
        assert resp.status == 200
        body = await resp.json()
    assert body["metadata"]["deletionGracePeriodSeconds"] == 7


async def test_finalizers_and_grace(sim: RunningApiServer, core: client.CoreV1Api) -> None:
    held = pod("held", nodeName=NODE)
    held["metadata"]["finalizers"] = ["example.com/keep"]
    await core.create_namespaced_pod("default", held)
    marked = await core.delete_namespaced_pod("held", "default")
    assert marked.metadata.deletion_grace_period_seconds == 30
    # The last finalizer going does not end a graceful deletion: the kubelet still must.
    await core.patch_namespaced_pod("held", "default", {"metadata": {"finalizers": None}})
    assert sim.server.try_get("pods", "held", namespace="default") is not None
    await core.delete_namespaced_pod("held", "default", grace_period_seconds=0)
    assert sim.server.try_get("pods", "held", namespace="default") is None
    # On a node without a kubelet stand-in, the pod is marked without grace, and goes with it.
    elsewhere = pod("elsewhere", nodeName="other-node")
    elsewhere["metadata"]["finalizers"] = ["example.com/keep"]
    await core.create_namespaced_pod("default", elsewhere)
    marked = await core.delete_namespaced_pod("elsewhere", "default")
    assert marked.metadata.deletion_grace_period_seconds == 0
    await core.patch_namespaced_pod("elsewhere", "default", {"metadata": {"finalizers": None}})
    assert sim.server.try_get("pods", "elsewhere", namespace="default") is None
    # Without grace (any other kind), it does.
    await core.create_namespaced_config_map(
        "default", {"metadata": {"name": "cm", "finalizers": ["example.com/keep"]}}
    )
    await core.delete_namespaced_config_map("cm", "default")
    assert (
        sim.server.get("configmaps", "cm", namespace="default")["metadata"][
            "deletionGracePeriodSeconds"
        ]
        == 0
    )
    await core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    assert sim.server.try_get("configmaps", "cm", namespace="default") is None


async def test_a_pod_ignoring_sigterm_takes_its_whole_grace_period(
    sim: RunningApiServer, core: client.CoreV1Api
) -> None:
    body = pod("stubborn", nodeName=NODE, terminationGracePeriodSeconds=1)
    body["metadata"]["annotations"] = {IGNORES_SIGTERM_ANNOTATION: "true"}
    await core.create_namespaced_pod("default", body)
    kubelet = sim.server.kubelets[NODE]
    assert isinstance(kubelet, KubeletStandIn)
    async with kubelet:
        loop = asyncio.get_running_loop()
        deleted_at = loop.time()
        await core.delete_namespaced_pod("stubborn", "default")
        await eventually(
            lambda: sim.server.try_get("pods", "stubborn", namespace="default") is None,
            within=5.0,
        )
        assert loop.time() - deleted_at >= 0.9  # killed when its grace period ended


@pytest.mark.parametrize(
    ("annotations", "grace", "cap", "delay"),
    [
        pytest.param({IGNORES_SIGTERM_ANNOTATION: "true"}, 3, 30.0, 3.0, id="whole grace"),
        pytest.param({IGNORES_SIGTERM_ANNOTATION: "true"}, 300, 30.0, 30.0, id="capped"),
        pytest.param({}, 3, 30.0, 0.0, id="stops on SIGTERM"),
        pytest.param({IGNORES_SIGTERM_ANNOTATION: "true"}, 0, 30.0, 0.0, id="grace 0"),
    ],
)
def test_how_long_a_marked_pod_takes_to_stop(
    annotations: dict[str, str], grace: int, cap: float, delay: float
) -> None:
    marked = {"metadata": {"annotations": annotations, "deletionGracePeriodSeconds": grace}}
    assert stop_delay(PodView(marked), cap=cap) == delay
