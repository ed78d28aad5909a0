"""Admission dispatch end to end: the emulated API server, the dispatcher, HTTPS webhooks."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from kubernetes_asyncio.client.exceptions import ApiException

from hami_kube.config import KubeSettings
from hami_kube.errors import ApiError
from hami_kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, NAMESPACES, PODS
from hami_kube.rest import KubeClient, open_client
from hami_kubesim.admission.dispatch import AdmissionDispatcher
from hami_kubesim.certs import ServerCertificate, ca_bundle_b64, generate_ca
from hami_kubesim.stack.system.ports import free_port
from hami_kubesim.testing import eventually, running_apiserver

pytestmark = pytest.mark.timeout(60)

SERVICE_HOST = "hami-webhook.kube-system.svc"

Behaviour = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class WebhookServer:
    """A tiny mutating webhook: records every AdmissionReview and answers with ``behaviour``."""

    behaviour: Behaviour
    received: list[dict[str, Any]] = field(default_factory=list)
    queries: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.received.append(review)
        self.queries.append(dict(request.query))
        response = await self.behaviour(review["request"])
        response.setdefault("uid", review["request"]["uid"])
        return web.json_response(
            {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}
        )


def patch_response(*ops: dict[str, Any]) -> dict[str, Any]:
    return {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(list(ops)).encode()).decode(),
    }


async def add_annotation(request: dict[str, Any]) -> dict[str, Any]:
    ops: list[dict[str, Any]] = []
    if not request["object"]["metadata"].get("annotations"):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops.append({"op": "add", "path": "/metadata/annotations/hami.io~1mutated", "value": "yes"})
    return patch_response(*ops)


@asynccontextmanager
async def serve(server: WebhookServer, cert: ServerCertificate | None) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/webhook", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ssl_context = cert.server_ssl_context() if cert else None
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    server.port = runner.addresses[0][1]
    scheme = "https" if cert else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.port}"
    finally:
        await runner.cleanup()


@dataclass
class Cluster:
    api: KubeClient
    dispatcher: AdmissionDispatcher
    url: str
    core: CoreV1Api

    async def add_webhooks(self, name: str, *hooks: dict[str, Any]) -> None:
        await self.api.create(
            MUTATING_WEBHOOK_CONFIGURATIONS,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": list(hooks),
            },
        )
        wanted = {hook["name"] for hook in hooks}
        await eventually(
            lambda: wanted <= {h.name for h in self.dispatcher.webhooks},
            what=f"the dispatcher sees {sorted(wanted)}",
        )

    async def create_pod(
        self, name: str, namespace: str = "default", labels: dict[str, str] | None = None
    ) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
        return await self.api.create(PODS, body, namespace=namespace)


@pytest.fixture(scope="module")
def tls() -> tuple[ServerCertificate, ServerCertificate]:
    """A webhook certificate, and one from an unrelated CA."""
    good = generate_ca("test-ca").issue(["127.0.0.1", SERVICE_HOST])
    other = generate_ca("other-ca").issue(["127.0.0.1"])
    return good, other


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    dispatcher = AdmissionDispatcher()
    async with (
        running_apiserver(admission=dispatcher) as sim,
        dispatcher.connected(sim.url),
        open_client(KubeSettings(kube_url=sim.url)) as api,
    ):
        yield Cluster(api=api, dispatcher=dispatcher, url=sim.url, core=CoreV1Api(sim.api_client()))


def hook(name: str, url: str, ca: bytes | None = None, **overrides: Any) -> dict[str, Any]:
    client_config: dict[str, Any] = {"url": url + "/webhook"}
    if ca is not None:
        client_config["caBundle"] = ca_bundle_b64(ca)
    spec: dict[str, Any] = {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Fail",
    }
    spec.update(overrides)
    return spec


# -- mutation -------------------------------------------------------------------------------


async def test_https_webhook_mutates_the_pod(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls
    server = WebhookServer(add_annotation)
    async with serve(server, cert) as url:
        await cluster.add_webhooks("hami", hook("vgpu.hami.io", url, cert.ca_pem))
        await cluster.create_pod("p1")
        # a real client sees the stored, mutated pod
        stored = await cluster.core.read_namespaced_pod("p1", "default")
    assert stored.metadata.annotations == {"hami.io/mutated": "yes"}
    (review,) = server.received
    assert review["apiVersion"] == "admission.k8s.io/v1"
    request = review["request"]
    assert request["operation"] == "CREATE"
    assert request["namespace"] == "default"
    assert request["name"] == "p1"
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["object"]["kind"] == "Pod"
    assert request["oldObject"] is None
    assert request["dryRun"] is False
    assert server.queries == [{"timeout": "10s"}]


async def test_service_reference_resolves_through_the_mapping(cluster: Cluster) -> None:
    # Only the service's DNS name is in the certificate: the TLS server name must be
    # <name>.<namespace>.svc even though the connection goes to 127.0.0.1.
    cert = generate_ca("svc-ca").issue([SERVICE_HOST])
    server = WebhookServer(add_annotation)
    async with serve(server, cert) as url:
        cluster.dispatcher.service_urls[("kube-system", "hami-webhook")] = url
        service_hook = hook("svc.hami.io", url, cert.ca_pem, timeoutSeconds=5)
        service_hook["clientConfig"] = {
            "service": {"namespace": "kube-system", "name": "hami-webhook", "path": "/webhook"},
            "caBundle": ca_bundle_b64(cert.ca_pem),
        }
        await cluster.add_webhooks("svc", service_hook)
        pod = await cluster.create_pod("p2")
    assert pod["metadata"]["annotations"] == {"hami.io/mutated": "yes"}
    assert server.queries == [{"timeout": "5s"}]


async def test_webhooks_run_in_configuration_order_and_see_earlier_patches(
    cluster: Cluster, tls: Any
) -> None:
    cert, _ = tls
    seen: list[dict[str, str]] = []

    async def second(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(request["object"]["metadata"].get("annotations") or {}))
        return patch_response({"op": "add", "path": "/metadata/labels/second", "value": "yes"})

    first_server, second_server = WebhookServer(add_annotation), WebhookServer(second)
    async with serve(first_server, cert) as first_url, serve(second_server, cert) as second_url:
        # "a-..." sorts before "b-...": configurations run by name, not by creation order
        await cluster.add_webhooks("b-second", hook("second.hami.io", second_url, cert.ca_pem))
        await cluster.add_webhooks("a-first", hook("first.hami.io", first_url, cert.ca_pem))
        pod = await cluster.create_pod("p3")
    assert seen == [{"hami.io/mutated": "yes"}]
    assert pod["metadata"]["labels"] == {"second": "yes"}
    assert pod["metadata"]["annotations"] == {"hami.io/mutated": "yes"}


async def test_if_needed_webhook_is_reinvoked_after_a_later_change(
    cluster: Cluster, tls: Any
) -> None:
    cert, _ = tls

    async def noop(_request: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": True}

    first, second = WebhookServer(noop), WebhookServer(add_annotation)
    async with serve(first, cert) as first_url, serve(second, cert) as second_url:
        await cluster.add_webhooks(
            "order",
            hook("first.hami.io", first_url, cert.ca_pem, reinvocationPolicy="IfNeeded"),
            hook("second.hami.io", second_url, cert.ca_pem),
        )
        await cluster.create_pod("p4")
    assert len(first.received) == 2
    assert first.received[1]["request"]["object"]["metadata"]["annotations"] == {
        "hami.io/mutated": "yes"
    }
    assert len(second.received) == 1


async def test_v1beta1_only_webhook_gets_v1beta1(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls

    async def old_style(_request: dict[str, Any]) -> dict[str, Any]:
        ops = [{"op": "add", "path": "/metadata/labels/old", "value": "yes"}]
        # v1beta1 replies need neither the uid nor patchType
        return {
            "uid": "",
            "allowed": True,
            "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
        }

    server = WebhookServer(old_style)
    async with serve(server, cert) as url:
        await cluster.add_webhooks(
            "old", hook("old.hami.io", url, cert.ca_pem, admissionReviewVersions=["v1beta1"])
        )
        pod = await cluster.create_pod("p5")
    assert server.received[0]["apiVersion"] == "admission.k8s.io/v1beta1"
    assert pod["metadata"]["labels"] == {"old": "yes"}


# -- rejection and failure policy -----------------------------------------------------------


async def test_denial_reaches_the_client_as_4xx(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls

    async def deny(_request: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": False, "status": {"code": 403, "message": "no vGPU quota left"}}

    async with serve(WebhookServer(deny), cert) as url:
        await cluster.add_webhooks("deny", hook("deny.hami.io", url, cert.ca_pem))
        with pytest.raises(ApiException) as info:
            await cluster.core.create_namespaced_pod(
                "default",
                V1Pod(
                    metadata=V1ObjectMeta(name="p6"),
                    spec=V1PodSpec(containers=[V1Container(name="c", image="x")]),
                ),
            )
    assert info.value.status == 403
    status = json.loads(info.value.body or b"{}")
    assert (
        status["message"]
        == 'admission webhook "deny.hami.io" denied the request: no vGPU quota left'
    )
    with pytest.raises(ApiError) as missing:
        await cluster.api.get(PODS, "p6", namespace="default")
    assert missing.value.status == 404


async def test_denial_without_code_is_400(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls

    async def deny(_request: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": False}

    async with serve(WebhookServer(deny), cert) as url:
        await cluster.add_webhooks("deny", hook("deny.hami.io", url, cert.ca_pem))
        with pytest.raises(ApiError) as info:
            await cluster.create_pod("p7")
    assert info.value.status == 400
    assert (
        info.value.message
        == 'admission webhook "deny.hami.io" denied the request without explanation'
    )


@pytest.mark.parametrize(("policy", "created"), [("Ignore", True), ("Fail", False)])
async def test_webhook_down(cluster: Cluster, policy: str, created: bool) -> None:
    url = f"https://127.0.0.1:{free_port()}"
    await cluster.add_webhooks("down", hook("down.hami.io", url, failurePolicy=policy))
    if created:
        pod = await cluster.create_pod("p8")
        assert "annotations" not in pod["metadata"] or not pod["metadata"]["annotations"]
        return
    with pytest.raises(ApiError) as info:
        await cluster.create_pod("p8")
    assert info.value.status == 500
    assert info.value.message.startswith(
        'Internal error occurred: failed calling webhook "down.hami.io": failed to call webhook: '
        f'Post "{url}/webhook?timeout=10s"'
    )


async def test_untrusted_certificate_fails_closed(cluster: Cluster, tls: Any) -> None:
    good, other = tls
    server = WebhookServer(add_annotation)
    async with serve(server, other) as url:
        await cluster.add_webhooks("tls", hook("tls.hami.io", url, good.ca_pem))
        with pytest.raises(ApiError) as info:
            await cluster.create_pod("p9")
    assert info.value.status == 500
    assert "certificate verify failed" in info.value.message
    assert server.received == []


@pytest.mark.looptime  # the 1 s timeout expires on virtual time
async def test_slow_webhook_times_out(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls
    loop = asyncio.get_running_loop()
    release = asyncio.Event()

    async def slow(_request: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {"allowed": True}

    async with serve(WebhookServer(slow), cert) as url:
        await cluster.add_webhooks("slow", hook("slow.hami.io", url, cert.ca_pem, timeoutSeconds=1))
        started = loop.time()
        with pytest.raises(ApiError) as info:
            await cluster.create_pod("p10")
        assert loop.time() - started == pytest.approx(1.0, abs=0.1)
        release.set()
    assert info.value.status == 500
    assert "context deadline exceeded" in info.value.message


async def test_wrong_uid_is_an_invalid_response(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls

    async def liar(_request: dict[str, Any]) -> dict[str, Any]:
        return {"uid": "not-the-request", "allowed": True}

    async with serve(WebhookServer(liar), cert) as url:
        await cluster.add_webhooks("liar", hook("liar.hami.io", url, cert.ca_pem))
        with pytest.raises(ApiError) as info:
            await cluster.create_pod("p11")
    assert info.value.status == 500
    assert "received invalid webhook response" in info.value.message


async def test_patch_that_does_not_apply_is_an_internal_error_even_when_ignored(
    cluster: Cluster, tls: Any
) -> None:
    cert, _ = tls

    async def broken(_request: dict[str, Any]) -> dict[str, Any]:
        return patch_response({"op": "remove", "path": "/metadata/nothing-here"})

    async with serve(WebhookServer(broken), cert) as url:
        await cluster.add_webhooks(
            "broken", hook("broken.hami.io", url, cert.ca_pem, failurePolicy="Ignore")
        )
        with pytest.raises(ApiError) as info:
            await cluster.create_pod("p12")
    assert info.value.status == 500


# -- selectors ------------------------------------------------------------------------------


async def test_namespace_and_object_selectors(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    server = WebhookServer(add_annotation)
    await cluster.api.create(
        NAMESPACES, {"metadata": {"name": "skipped", "labels": {"hami.io/webhook": "ignore"}}}
    )
    await cluster.api.create(NAMESPACES, {"metadata": {"name": "gpu-team"}})
    async with serve(server, cert) as url:
        await cluster.add_webhooks(
            "selectors",
            hook(
                "sel.hami.io",
                url,
                cert.ca_pem,
                namespaceSelector={"matchExpressions": [ignore]},
                objectSelector={"matchExpressions": [ignore]},
            ),
        )
        in_skipped_ns = await cluster.create_pod("a", namespace="skipped")
        labelled = await cluster.create_pod("b", labels={"hami.io/webhook": "ignore"})
        normal = await cluster.create_pod("c", namespace="gpu-team")
    assert not in_skipped_ns["metadata"].get("annotations")
    assert not labelled["metadata"].get("annotations")
    assert normal["metadata"]["annotations"] == {"hami.io/mutated": "yes"}
    assert [r["request"]["name"] for r in server.received] == ["c"]


async def test_namespace_selector_on_the_metadata_name_label(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls
    server = WebhookServer(add_annotation)
    await cluster.api.create(NAMESPACES, {"metadata": {"name": "team-a"}})
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    async with serve(server, cert) as url:
        await cluster.add_webhooks(
            "by-name", hook("name.hami.io", url, cert.ca_pem, namespaceSelector=selector)
        )
        await cluster.create_pod("x", namespace="team-a")
        await cluster.create_pod("y", namespace="default")
    assert [r["request"]["namespace"] for r in server.received] == ["team-a"]


async def test_rules_that_do_not_match_pods_are_skipped(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls
    server = WebhookServer(add_annotation)
    rules = [
        {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
    ]
    async with serve(server, cert) as url:
        await cluster.add_webhooks("updates", hook("upd.hami.io", url, cert.ca_pem, rules=rules))
        pod = await cluster.create_pod("z")
    assert server.received == []
    assert not pod["metadata"].get("annotations")


async def test_dispatcher_follows_configuration_deletes(cluster: Cluster, tls: Any) -> None:
    cert, _ = tls
    server = WebhookServer(add_annotation)
    async with serve(server, cert) as url:
        await cluster.add_webhooks("temp", hook("temp.hami.io", url, cert.ca_pem))
        await cluster.api.delete(MUTATING_WEBHOOK_CONFIGURATIONS, "temp")
        await eventually(lambda: not cluster.dispatcher.webhooks, what="no webhooks left")
        pod = await cluster.create_pod("after-delete")
    assert server.received == []
    assert not pod["metadata"].get("annotations")


async def test_calls_before_sync_are_refused() -> None:
    dispatcher = AdmissionDispatcher(sync_timeout=0.05)
    async with (
        running_apiserver(admission=dispatcher) as sim,
        open_client(KubeSettings(kube_url=sim.url)) as api,
    ):
        with pytest.raises(ApiError) as info:
            await api.create(
                PODS,
                {
                    "metadata": {"name": "early"},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
                namespace="default",
            )
    assert info.value.status == 403
    assert "not yet ready" in info.value.message
