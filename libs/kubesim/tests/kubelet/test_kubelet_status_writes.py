"""The kubelet stand-in's pod status writes never undo a condition another component wrote.

A kubelet builds a pod's status from its own view of the pod, which may be older than the API's:
kube-scheduler may have marked the pod ``DisruptionTarget`` (a preemption victim) since, or a
controller set a readiness gate.  The real kubelet merges into the API's latest and sends a
strategic merge patch; the stand-in must keep those conditions too, or a preemptor sees its
victim unmarked and preempts again (a fault scenario did, under load).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from hami_kube.config import KubeSettings
from hami_kube.objects import PodView
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient, PatchType, open_client
from hami_kubesim.kubelet.pods.statusmanager import KUBELET_CONDITIONS, patch_pod_status
from hami_kubesim.kubelet.status import running_status
from hami_kubesim.testing import running_apiserver

NOW = "2026-01-02T03:04:05Z"
MARK = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "hami-scheduler: preempting to accommodate a higher priority pod",
    "lastTransitionTime": NOW,
}
GATE = {"type": "example.com/ready", "status": "True", "lastTransitionTime": NOW}


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    async with running_apiserver() as running:
        settings = KubeSettings(kube_url=running.url, request_timeout_s=10.0)
        async with open_client(settings) as client:
            yield client


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "node-a",
            "readinessGates": [{"conditionType": GATE["type"]}],
            "containers": [{"name": "c", "image": "img:1"}],
        },
    }


def _types(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"].get("conditions") or []}


async def test_a_status_built_from_an_older_view_keeps_newer_conditions(kube: KubeClient) -> None:
    created = await kube.create(PODS, _pod("victim"), namespace="default")
    stale = PodView(created)  # what the kubelet saw: no mark, no gate
    for condition in (MARK, GATE):
        await kube.patch(
            PODS,
            "victim",
            {"status": {"conditions": [condition]}},
            namespace="default",
            patch_type=PatchType.STRATEGIC,
            subresource="status",
        )

    written = await patch_pod_status(
        kube, stale, running_status(stale, host_ip="10.0.0.1", pod_ip="10.244.0.5", now=NOW)
    )

    assert written is not None
    conditions = _types(written)
    assert conditions["DisruptionTarget"] == MARK
    assert conditions[GATE["type"]] == GATE
    assert conditions["Ready"]["status"] == "True"
    assert written["status"]["phase"] == "Running"


async def test_the_kubelet_sends_only_the_conditions_it_owns(kube: KubeClient) -> None:
    """A condition in the kubelet's older view that someone changed since is not written back."""
    created = await kube.create(PODS, _pod("gated"), namespace="default")
    older = {**GATE, "status": "False"}
    view = PodView({**created, "status": {"conditions": [older]}})
    await kube.patch(
        PODS,
        "gated",
        {"status": {"conditions": [GATE]}},
        namespace="default",
        patch_type=PatchType.STRATEGIC,
        subresource="status",
    )

    status = running_status(view, host_ip="10.0.0.1", pod_ip="10.244.0.6", now=NOW)
    assert older in status["conditions"]  # the builder keeps what it saw ...
    written = await patch_pod_status(kube, view, status)

    assert written is not None
    assert _types(written)[GATE["type"]] == GATE  # ... the write does not send it
    assert set(_types(written)) == KUBELET_CONDITIONS | {GATE["type"]}
