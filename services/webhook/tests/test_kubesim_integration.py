"""The webhook behind the emulated API server's admission dispatch, over HTTPS with a caBundle.

Pods are created through the API server; it calls the webhook as configured by a
MutatingWebhookConfiguration, applies the patch or refuses the pod, and follows
``failurePolicy`` when the webhook is down.  Quotas come from the webhook's own watches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from hami_kube.config import KubeSettings, create_api_client
from hami_kube.errors import ApiError
from hami_kube.rest import KubeClient
from hami_kubesim.admission.dispatch import AdmissionDispatcher
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.certs import client_ssl_context
from hami_kubesim.testing import running_apiserver
from hami_webhook.app import RunningWebhook, serving
from hami_webhook.settings import Settings

from .helpers import (
    MWC_PATH,
    WEBHOOK,
    WebhookTls,
    container,
    eventually,
    gpu,
    pod,
    webhook_configuration,
)

pytestmark = pytest.mark.timeout(60)


@dataclass
class Cluster:
    url: str
    api: KubeClient
    dispatcher: AdmissionDispatcher
    server: ApiServer

    async def register(
        self, webhook_url: str, ca: bytes, *, failure_policy: str = "Ignore", version: str = "v1"
    ) -> None:
        """Register the chart's configuration and wait until the API server uses it."""
        await self.api.request(
            "POST",
            MWC_PATH,
            body=webhook_configuration(
                webhook_url, ca, failure_policy=failure_policy, version=version
            ),
        )
        await eventually(
            lambda: WEBHOOK in {h.name for h in self.dispatcher.webhooks}, what="webhook registered"
        )

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        namespace = obj["metadata"].get("namespace", "default")
        return await self.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=obj)


def sample(running: RunningWebhook, name: str, **labels: str) -> float | None:
    return running.metrics.registry.get_sample_value(name, labels)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    dispatcher = AdmissionDispatcher()
    async with running_apiserver(admission=dispatcher) as sim, dispatcher.connected(sim.url):
        api_client = await create_api_client(KubeSettings(kube_url=sim.url))
        api = KubeClient(api_client)
        try:
            yield Cluster(sim.url, api, dispatcher, sim.server)
        finally:
            await api_client.close()


@asynccontextmanager
async def webhook(
    cluster: Cluster, tls: WebhookTls, *, wait_ready: bool = True, **overrides: Any
) -> AsyncIterator[RunningWebhook]:
    values: dict[str, Any] = {
        "http_bind": "127.0.0.1:0",
        "metrics_bind_address": "127.0.0.1:0",
        "cert_file": str(tls.files.cert),
        "key_file": str(tls.files.key),
        "kube": KubeSettings(kube_url=cluster.url, request_timeout_s=10.0),
    }
    values.update(overrides)
    async with serving(Settings(**values)) as running:
        if wait_ready:
            await eventually(running.ready, what="quota watches synced")
        yield running


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_pods_are_mutated_through_admission(
    cluster: Cluster, tls: WebhookTls, version: str
) -> None:
    async with webhook(cluster, tls) as running:
        await cluster.register(
            running.url(), tls.cert.ca_pem, failure_policy="Fail", version=version
        )
        created = await cluster.create(pod(container(limits=gpu()), container("side"), name="gpu"))
        plain = await cluster.create(pod(container(), name="plain"))
        stored = await cluster.api.request("GET", "/api/v1/namespaces/default/pods/gpu")
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    assert not (stored["spec"]["containers"][1].get("resources") or {}).get("limits")
    assert plain["spec"].get("schedulerName") in (None, "default-scheduler")
    assert sample(running, "hami_webhook_admission_requests_total", outcome="mutated") == 1


async def test_denied_pods_are_refused_with_the_webhook_message(
    cluster: Cluster, tls: WebhookTls
) -> None:
    async with webhook(cluster, tls) as running:
        await cluster.register(running.url(), tls.cert.ca_pem)
        with pytest.raises(ApiError) as node_assigned:
            await cluster.create(pod(container(limits=gpu()), name="pinned", nodeName="node-1"))
        with pytest.raises(ApiError) as privileged:
            await cluster.create(pod(container("root", limits=gpu(), privileged=True), name="priv"))
        with pytest.raises(ApiError) as bad_pct:
            await cluster.create(pod(container(limits=gpu(pct=150)), name="pct"))
    assert node_assigned.value.status == 403
    assert node_assigned.value.message == (
        f'admission webhook "{WEBHOOK}" denied the request: pod has node assigned'
    )
    assert privileged.value.message.endswith("denied the request: container root is privileged")
    assert bad_pct.value.status == 500
    assert (
        "invalid nvidia.com/gpumem-percentage value 150 in container main" in bad_pct.value.message
    )
    with pytest.raises(ApiError) as missing:
        await cluster.api.request("GET", "/api/v1/namespaces/default/pods/pinned")
    assert missing.value.status == 404


async def test_ignore_label_skips_the_webhook(cluster: Cluster, tls: WebhookTls) -> None:
    async with webhook(cluster, tls) as running:
        await cluster.register(running.url(), tls.cert.ca_pem, failure_policy="Fail")
        created = await cluster.create(
            pod(
                container(limits=gpu()),
                name="skip",
                nodeName="n1",
                labels={"hami.io/webhook": "ignore"},
            )
        )
    assert created["spec"]["nodeName"] == "n1"
    assert sample(running, "hami_webhook_admission_requests_total", outcome="denied") == 0


async def test_namespace_quota_from_watched_objects(cluster: Cluster, tls: WebhookTls) -> None:
    await cluster.api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    async with webhook(cluster, tls) as running:
        assert running.quota is not None
        await cluster.register(running.url(), tls.cert.ca_pem, failure_policy="Fail")
        await cluster.api.request(
            "POST",
            "/api/v1/namespaces/team/resourcequotas",
            body={
                "metadata": {"name": "gpu-quota", "namespace": "team"},
                "spec": {
                    "hard": {
                        "limits.nvidia.com/gpumem": "4000",
                        "limits.nvidia.com/gpucores": "200",
                    }
                },
            },
        )
        # A pod placed and bound already, as HAMi before 2.5 left it: the allocation
        # annotation, no hami.io/vgpu-node label (another scheduler name keeps the webhook
        # from touching it on its way in).
        await cluster.create(
            pod(
                container(limits=gpu(mem=2000, cores=50)),
                name="placed",
                namespace="team",
                nodeName="node-1",
                annotations={
                    "hami.io/vgpu-node": "node-1",
                    "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,2000,50:;",
                },
                schedulerName="elsewhere",
            )
        )
        # A pod whose decision arrives with its Binding counts from then on.
        await cluster.create(
            pod(
                container(limits=gpu(mem=1000)),
                name="binding",
                namespace="team",
                schedulerName="elsewhere",
            )
        )
        quota = running.quota
        await eventually(
            lambda: (
                quota.used("team", "nvidia.com/gpumem") == 2000
                and quota.limit("team", "nvidia.com/gpumem") is not None
            ),
            what="quota cache follows the cluster",
        )
        await cluster.server.bind(
            "team",
            "binding",
            "node-1",
            annotations={
                "hami.io/vgpu-node": "node-1",
                "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,1000,0:;",
            },
        )
        await eventually(
            lambda: quota.used("team", "nvidia.com/gpumem") == 3000, what="the bound pod counts"
        )
        with pytest.raises(ApiError) as over:
            await cluster.create(
                pod(container(limits=gpu(mem=2000, cores=10)), name="big", namespace="team")
            )
        fits = await cluster.create(
            pod(container(limits=gpu(mem=1000, cores=10)), name="small", namespace="team")
        )
        # The same pod fits elsewhere: quotas are per namespace.
        await cluster.create(pod(container(limits=gpu(mem=2000, cores=10)), name="big"))

        await cluster.server.delete("pods", "placed", namespace="team")
        await cluster.server.delete("pods", "binding", namespace="team")
        await eventually(
            lambda: quota.used("team", "nvidia.com/gpumem") == 0, what="usage released"
        )
        await cluster.create(
            pod(container(limits=gpu(mem=2000, cores=10)), name="big", namespace="team")
        )
        quotas_seen = sample(running, "hami_webhook_quota_cache_objects", kind="resourcequotas")
    assert over.value.status == 403
    assert over.value.message == (
        f'admission webhook "{WEBHOOK}" denied the request: exceeding resource quota: '
        "ResourceQuota team/gpu-quota limits.nvidia.com/gpumem=4000, used 3000, requested 2000"
    )
    assert fits["spec"]["schedulerName"] == "hami-scheduler"
    assert quotas_seen == 1


@pytest.mark.parametrize(("policy", "created"), [("Ignore", True), ("Fail", False)])
async def test_failure_policy_when_the_webhook_is_down(
    cluster: Cluster, tls: WebhookTls, policy: str, created: bool
) -> None:
    async with webhook(cluster, tls, enable_quota=False) as running:
        await cluster.register(running.url(), tls.cert.ca_pem, failure_policy=policy)
        url = running.url()
    # The webhook has stopped; its port is closed.
    obj = pod(container(limits=gpu()), name="while-down")
    if created:
        stored = await cluster.create(obj)
        assert stored["spec"].get("schedulerName") in (None, "default-scheduler")
        assert "nvidia.com/gpucores" not in stored["spec"]["containers"][0]["resources"]["limits"]
        return
    with pytest.raises(ApiError) as info:
        await cluster.create(obj)
    assert info.value.status == 500
    assert f'failed calling webhook "{WEBHOOK}"' in info.value.message
    assert url in info.value.message


async def test_ready_only_once_the_quota_watches_have_listed(
    cluster: Cluster, tls: WebhookTls
) -> None:
    cluster.server.inject_error("list", "resourcequotas", code=500)
    async with webhook(cluster, tls, wait_ready=False) as running:
        context = client_ssl_context(tls.cert.ca_pem)
        async with aiohttp.ClientSession() as http:

            async def readyz() -> int:
                async with http.get(running.url() + "/readyz", ssl=context) as response:
                    return response.status

            async def metrics_readyz() -> int:
                url = f"http://127.0.0.1:{running.metrics_port}/readyz"
                async with http.get(url) as response:
                    return response.status

            assert (await readyz(), await metrics_readyz()) == (503, 503)
            assert sample(running, "hami_webhook_quota_cache_synced") == 0
            # Reviews are answered while not ready.
            await cluster.register(running.url(), tls.cert.ca_pem, failure_policy="Fail")
            created = await cluster.create(pod(container(limits=gpu()), name="early"))
            assert created["spec"]["schedulerName"] == "hami-scheduler"
            cluster.server.clear_faults()
            await eventually(running.ready, what="quota watches recover and list")
            assert (await readyz(), await metrics_readyz()) == (200, 200)
            assert sample(running, "hami_webhook_quota_cache_synced") == 1
