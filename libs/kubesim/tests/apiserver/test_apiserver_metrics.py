"""``apiserver_request_total`` and ``kubesim_client_requests_total``: what each client sent.

Requests go through real HTTP with :mod:`hami_kube` clients that name themselves in their
User-Agent, as the services and the stand-ins do; the counts are read in-process and from
``/metrics``.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import aiohttp
import pytest

from hami_kube.config import KubeSettings
from hami_kube.errors import NotFoundError, ServerError
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES, PODS
from hami_kube.rest import KubeClient, open_client
from hami_kubesim.apiserver.metrics import RequestCounts, RequestKey, client_name, kube_verb
from hami_kubesim.stack.metrics import parse_samples, sample_value
from hami_kubesim.testing import RunningApiServer, eventually


@contextlib.asynccontextmanager
async def client(sim: RunningApiServer, user_agent: str) -> AsyncIterator[KubeClient]:
    settings = KubeSettings(kube_url=sim.url, request_timeout_s=10.0, user_agent=user_agent)
    async with open_client(settings) as kube:
        yield kube


def _pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


async def test_requests_are_counted_by_verb_resource_subresource_code_and_client(
    sim: RunningApiServer,
) -> None:
    await sim.server.create("nodes", {"metadata": {"name": "n1"}})  # in-process: not counted
    async with (
        client(sim, "hami-scheduler/v0.1 (linux)") as scheduler,
        client(sim, "kubelet/n1") as kubelet,
    ):
        await scheduler.create(PODS, _pod("p"))
        await scheduler.list(PODS, namespace="default")
        with pytest.raises(NotFoundError):
            await scheduler.get(PODS, "missing", namespace="default")
        await patch_metadata(scheduler, NODES, "n1", annotations={"a": "b"})
        await scheduler.post_subresource(
            PODS,
            "p",
            "binding",
            {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}},
            namespace="default",
        )
        await kubelet.patch(
            PODS, "p", {"status": {"phase": "Running"}}, namespace="default", subresource="status"
        )
        async with kubelet.watch(PODS, namespace="default", timeout_seconds=1) as events:
            async for _ in events:
                break
        await kubelet.delete(PODS, "p", namespace="default")

    counts = sim.server.requests.counts()
    assert counts.by("client", "verb", "resource", "subresource", "code") == Counter(
        {
            ("hami-scheduler", "POST", "pods", "", "201"): 1,
            ("hami-scheduler", "LIST", "pods", "", "200"): 1,
            ("hami-scheduler", "GET", "pods", "", "404"): 1,
            ("hami-scheduler", "PATCH", "nodes", "", "200"): 1,
            ("hami-scheduler", "POST", "pods", "binding", "201"): 1,
            ("kubelet", "PATCH", "pods", "status", "200"): 1,
            ("kubelet", "WATCH", "pods", "", "200"): 1,
            ("kubelet", "DELETE", "pods", "", "200"): 1,
        }
    )
    assert counts.count(client="hami-scheduler") == 5
    assert counts.count(verb="PATCH") == 2
    assert counts.count(code=404) == 1
    assert counts.by("verb", client="kubelet") == Counter(
        {("PATCH",): 1, ("WATCH",): 1, ("DELETE",): 1}
    )


async def test_injected_faults_are_answers_and_the_metrics_endpoint_serves_both_counters(
    sim: RunningApiServer,
) -> None:
    sim.server.inject_error("list", "pods", code=503, times=1)
    async with client(sim, "hami-webhook") as webhook, aiohttp.ClientSession() as http:
        before = sim.server.requests.counts()
        with pytest.raises(ServerError):
            await webhook.list(PODS)  # the client retries nothing itself: one 503
        await webhook.list(PODS)
        async with http.get(f"{sim.url}/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1"):
            pass
        async with http.get(f"{sim.url}/api/v1/namespaces/default/pods?watch=1&fieldSelector=x"):
            pass  # a watch refused before it starts: counted with its code
        async with http.get(f"{sim.url}/api") as discovery:
            assert discovery.status == 200  # not a resource request: not counted
        async with http.get(f"{sim.url}/metrics") as response:
            assert response.status == 200
            assert response.content_type == "text/plain"
            samples = parse_samples(await response.text())

    step = sim.server.requests.counts().since(before)
    assert step.by("client", "verb", "code") == Counter(
        {
            ("hami-webhook", "LIST", "503"): 1,
            ("hami-webhook", "LIST", "200"): 1,
            ("Python", "WATCH", "200"): 1,
            ("Python", "WATCH", "400"): 1,
        }
    )
    assert step.total() == 4
    assert sample_value(samples, "apiserver_request_total", verb="LIST", code="503") == 1
    assert sample_value(samples, "apiserver_request_total", verb="WATCH", resource="pods") == 2
    assert (
        sample_value(
            samples,
            "kubesim_client_requests_total",
            client="hami-webhook",
            verb="LIST",
            resource="pods",
            subresource="",
            code="200",
        )
        == 1
    )


async def test_a_legacy_binding_counts_as_bindings(sim: RunningApiServer) -> None:
    await sim.server.create("pods", _pod("legacy"))
    await sim.server.create("nodes", {"metadata": {"name": "n1"}})
    async with aiohttp.ClientSession(headers={"User-Agent": "old-scheduler/1"}) as http:
        body = {"metadata": {"name": "legacy"}, "target": {"kind": "Node", "name": "n1"}}
        async with http.post(f"{sim.url}/api/v1/namespaces/default/bindings", json=body) as resp:
            assert resp.status == 201
    await eventually(lambda: sim.server.requests.counts().total() == 1)
    assert sim.server.requests.counts().series == Counter(
        {RequestKey("old-scheduler", "POST", "bindings", "", "201"): 1}
    )
    sim.server.requests.reset()
    assert sim.server.requests.counts().total() == 0


def test_verbs_and_client_names_as_kube_apiserver_and_user_agents_spell_them() -> None:
    assert [kube_verb(v) for v in ("get", "list", "watch", "create", "update", "delete")] == [
        "GET",
        "LIST",
        "WATCH",
        "POST",
        "PUT",
        "DELETE",
    ]
    assert kube_verb("deletecollection") == "DELETECOLLECTION"
    assert kube_verb("patch", "application/merge-patch+json") == "PATCH"
    assert kube_verb("patch", "application/apply-patch+yaml") == "APPLY"
    assert client_name("kubectl/v1.31.0 (linux/amd64) kubernetes/abc") == "kubectl"
    assert client_name("hami-deviceplugin") == "hami-deviceplugin"
    assert client_name("") == client_name(None) == "unknown"
    with pytest.raises(ValueError, match="unknown labels"):
        RequestCounts().count(node="x")
    with pytest.raises(ValueError, match="unknown labels"):
        RequestCounts().by("node")
