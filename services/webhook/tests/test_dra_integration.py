"""``/webhook/dra`` behind the emulated API server's admission dispatch, over HTTPS: NVIDIA
requests become claims from shared templates, a dry run writes nothing, and the converted pods
take the DRA path (resourceclaim controller, the scheduler's allocator) with nothing orphaned.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hami_kube.config import KubeSettings
from hami_kube.errors import ApiError
from hami_kube.resources import (
    DEVICE_CLASSES,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from hami_kubesim import dra_objects
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.controllers.resourceclaim import ResourceClaimController
from hami_kubesim.scheduler.config import SchedulerConfig
from hami_kubesim.scheduler.loop import SchedulingLoop

from .helpers import MWC_PATH, WEBHOOK, WebhookTls, container, eventually, gpu, pod
from .helpers import webhook_configuration as configuration
from .test_kubesim_integration import Cluster, webhook
from .test_kubesim_integration import cluster as cluster  # noqa: PLC0414 (the fixture)

if ApiServer().registry.lookup("resource.k8s.io", "v1", "resourceclaimtemplates") is None:
    pytest.skip("kubesim does not serve resource.k8s.io/v1", allow_module_level=True)

pytestmark = pytest.mark.timeout(60)

NAMESPACE = "default"


async def register_dra(cluster: Cluster, url: str, ca: bytes) -> None:
    body = configuration(
        url, ca, failure_policy="Fail", path="/webhook/dra", side_effects="NoneOnDryRun"
    )
    await cluster.api.request("POST", MWC_PATH, body=body)
    await eventually(
        lambda: WEBHOOK in {h.name for h in cluster.dispatcher.webhooks}, what="webhook registered"
    )


async def templates(cluster: Cluster) -> list[dict[str, Any]]:
    found = await cluster.api.list(RESOURCE_CLAIM_TEMPLATES, namespace=NAMESPACE)
    return list(found["items"])


def gpu_pod(name: str, memory: int, **extra: Any) -> dict[str, Any]:
    return pod(container(limits=gpu(1, mem=memory)), name=name, **extra)


async def test_claims_from_shared_templates_and_a_dry_run_writes_nothing(
    cluster: Cluster, tls: WebhookTls
) -> None:
    async with webhook(cluster, tls, enable_quota=False, dra_claims=True) as running:
        assert running.templates is not None
        await register_dra(cluster, running.url(), tls.cert.ca_pem)
        dry = await cluster.api.request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            query={"dryRun": "All"},
            body=gpu_pod("dry", 4096),
        )
        assert dry["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith("hami-gpu-")
        assert await templates(cluster) == []
        assert running.templates.posts == 0

        first = await cluster.create(gpu_pod("first", 4096))
        second = await cluster.create(gpu_pod("second", 4096))
        other = await cluster.create(gpu_pod("other", 2048))
        stored = await templates(cluster)
    claims = [p["spec"]["resourceClaims"][0] for p in (dry, first, second, other)]
    names = [c["resourceClaimTemplateName"] for c in claims]
    assert names[0] == names[1] == names[2] != names[3]
    assert sorted(t["metadata"]["name"] for t in stored) == sorted({names[1], names[3]})
    # The second pod of a shape finds its template remembered: no POST.
    assert running.templates.posts == 2
    (shared,) = (t for t in stored if t["metadata"]["name"] == names[1])
    request = shared["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["capacity"] == {"requests": {"memory": "4Gi"}}
    main = first["spec"]["containers"][0]
    assert main["resources"] == {"claims": [{"name": "gpu-main"}]}
    # Left to the cluster's scheduler (kubesim defaults an unset name to default-scheduler).
    assert first["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"


async def test_a_refused_conversion_names_the_reason(cluster: Cluster, tls: WebhookTls) -> None:
    async with webhook(cluster, tls, enable_quota=False, dra_claims=True) as running:
        await register_dra(cluster, running.url(), tls.cert.ca_pem)
        with pytest.raises(ApiError) as refused:
            await cluster.create(pod(container(limits=gpu(1, pct=50)), name="pct"))
    assert refused.value.status == 500
    assert "nvidia.com/gpumem-percentage=50 cannot be converted to a DRA claim" in (
        refused.value.message
    )
    assert await templates(cluster) == []


async def test_the_path_refuses_without_the_flag(cluster: Cluster, tls: WebhookTls) -> None:
    async with webhook(cluster, tls, enable_quota=False) as running:
        await register_dra(cluster, running.url(), tls.cert.ca_pem)
        with pytest.raises(ApiError) as refused:
            await cluster.create(gpu_pod("p", 1024))
    assert "runs without --dra-claims" in refused.value.message


async def test_a_template_that_cannot_be_created_refuses_the_pod(
    cluster: Cluster, tls: WebhookTls
) -> None:
    # The webhook's own API server address answers nothing: the pod is refused (it would wait
    # for its claim forever otherwise) and the answer names the template.
    unreachable = KubeSettings(kube_url="http://127.0.0.1:1", request_timeout_s=2.0)
    async with webhook(
        cluster, tls, enable_quota=False, dra_claims=True, kube=unreachable
    ) as running:
        await register_dra(cluster, running.url(), tls.cert.ca_pem)
        with pytest.raises(ApiError) as refused:
            await cluster.create(gpu_pod("p", 1024))
    assert refused.value.status == 500
    assert "cannot create ResourceClaimTemplate hami-gpu-" in refused.value.message
    with pytest.raises(ApiError):
        await cluster.api.get(PODS, "p", namespace=NAMESPACE)


# -- the DRA path ----------------------------------------------------------------------------


async def dra_node(cluster: Cluster, node: str = "node-a") -> None:
    """A node with one shared 16Gi GPU in its slice, and the chart's DeviceClass."""
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    await cluster.api.create(DEVICE_CLASSES, dra_objects.device_class())
    await cluster.api.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node},
            "status": {"capacity": allocatable, "allocatable": allocatable},
        },
    )
    await cluster.api.create(
        RESOURCE_SLICES, dra_objects.resource_slice(node, [dra_objects.gpu_device(0)])
    )


async def bound(cluster: Cluster, name: str) -> str:
    async def node() -> str:
        found = await cluster.api.get(PODS, name, namespace=NAMESPACE)
        return str(found["spec"].get("nodeName") or "")

    async def placed() -> bool:
        return bool(await node())

    await eventually(placed, within=30, what=f"pod {name} bound")
    return await node()


async def claim_of(cluster: Cluster, pod_name: str) -> dict[str, Any]:
    """The claim the resourceclaim controller generated for ``pod_name``."""
    found: list[dict[str, Any]] = []

    async def generated() -> bool:
        items = (await cluster.api.list(RESOURCE_CLAIMS, namespace=NAMESPACE))["items"]
        found[:] = [
            c
            for c in items
            if any(o.get("name") == pod_name for o in c["metadata"].get("ownerReferences", ()))
        ]
        return bool(found)

    await eventually(generated, within=30, what=f"claim of {pod_name}")
    return found[0]


async def refusal(cluster: Cluster, pod_name: str, words: str) -> str:
    """The pod's FailedScheduling message containing ``words`` (the first attempt may come
    before the resourceclaim controller created the claim: "not created yet")."""
    found: list[str] = []

    async def recorded() -> bool:
        items = (await cluster.api.list(EVENTS, namespace=NAMESPACE))["items"]
        found[:] = [
            e["message"]
            for e in items
            if e["involvedObject"]["name"] == pod_name
            and e.get("reason") == "FailedScheduling"
            and words in e["message"]
        ]
        return bool(found)

    await eventually(recorded, within=30, what=f"FailedScheduling for {pod_name}: {words}")
    return found[-1]


async def test_converted_pods_share_a_gpu_and_their_claims_go_with_them(
    cluster: Cluster, tls: WebhookTls
) -> None:
    await dra_node(cluster)
    scheduler = SchedulingLoop(dataclasses.replace(SchedulerConfig()), api_url=cluster.url)
    async with (
        webhook(cluster, tls, enable_quota=False, dra_claims=True) as running,
        ResourceClaimController(cluster.url),
        scheduler,
    ):
        await register_dra(cluster, running.url(), tls.cert.ca_pem)
        for name in ("a", "b"):
            await cluster.create(gpu_pod(name, 4096))
        assert await bound(cluster, "a") == "node-a"
        assert await bound(cluster, "b") == "node-a"
        claims = {name: await claim_of(cluster, name) for name in ("a", "b")}
        await cluster.create(gpu_pod("c", 10240))
        message = await refusal(cluster, "c", "cannot allocate all claims")

        await cluster.api.delete(PODS, "a", namespace=NAMESPACE)
        gone = claims["a"]["metadata"]["name"]

        async def deleted() -> bool:
            items = (await cluster.api.list(RESOURCE_CLAIMS, namespace=NAMESPACE))["items"]
            return gone not in {c["metadata"]["name"] for c in items}

        await eventually(deleted, within=30, what="the deleted pod's claim removed")
    assert message.startswith("0/1 nodes are available: 1 cannot allocate all claims.")
    for claim in claims.values():
        owner = claim["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Pod"
        assert owner["controller"] is True
        assert claim["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "hami-webhook"}
    allocated = await cluster.api.get(
        RESOURCE_CLAIMS, claims["b"]["metadata"]["name"], namespace=NAMESPACE
    )
    (result,) = allocated["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0"
    assert result["consumedCapacity"] == {"memory": "4Gi", "cores": "0"}
