"""KubeClient against the emulated API server over HTTP."""

from __future__ import annotations

import pytest

from hami_kube import errors
from hami_kube.config import KubeSettings
from hami_kube.objects import ObjectView
from hami_kube.resources import NODES, PODS
from hami_kube.rest import KubeClient, PatchType, WatchEvent, open_client
from hami_kubesim.testing import RunningApiServer

from .helpers import node, pod


async def test_create_get_list_delete(kube: KubeClient) -> None:
    created = await kube.create(PODS, pod("a", labels={"app": "x"}))
    assert created["metadata"]["uid"]
    fetched = await kube.get(PODS, "a", namespace="default")
    assert fetched["metadata"]["uid"] == created["metadata"]["uid"]
    await kube.create(PODS, pod("b", node="n1"))
    listing = await kube.list(PODS, namespace="default")
    assert sorted(p["metadata"]["name"] for p in listing["items"]) == ["a", "b"]
    assert ObjectView(listing).resource_version
    on_node = await kube.list(PODS, field_selector="spec.nodeName=n1")
    assert [p["metadata"]["name"] for p in on_node["items"]] == ["b"]
    labelled = await kube.list(PODS, label_selector="app=x")
    assert [p["metadata"]["name"] for p in labelled["items"]] == ["a"]
    await kube.delete(PODS, "a", namespace="default")
    with pytest.raises(errors.NotFoundError):
        await kube.get(PODS, "a", namespace="default")


async def test_error_mapping(kube: KubeClient) -> None:
    await kube.create(NODES, node("n1"))
    with pytest.raises(errors.AlreadyExistsError) as exists:
        await kube.create(NODES, node("n1"))
    assert exists.value.status == 409
    with pytest.raises(errors.NotFoundError) as missing:
        await kube.delete(NODES, "absent")
    assert missing.value.details.get("name") == "absent"


async def test_replace_with_stale_resource_version_conflicts(kube: KubeClient) -> None:
    first = await kube.create(NODES, node("n1"))
    first["metadata"].setdefault("labels", {})["a"] = "1"
    second = await kube.replace(NODES, first)
    assert ObjectView(second).resource_version != ObjectView(first).resource_version
    first["metadata"]["labels"]["a"] = "2"
    with pytest.raises(errors.ConflictError):
        await kube.replace(NODES, first)


async def test_merge_patch_null_deletes(kube: KubeClient) -> None:
    await kube.create(NODES, node("n1", annotations={"keep": "1", "drop": "2"}))
    body = {"metadata": {"annotations": {"drop": None, "new": "3"}}}
    patched = await kube.patch(NODES, "n1", body)
    assert patched["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    json_patch = [{"op": "add", "path": "/metadata/labels", "value": {"l": "v"}}]
    patched = await kube.patch(NODES, "n1", json_patch, patch_type=PatchType.JSON)
    assert patched["metadata"]["labels"] == {"l": "v"}


async def test_binding_subresource(kube: KubeClient) -> None:
    await kube.create(PODS, pod("a"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a", "namespace": "default"},
        "target": {"kind": "Node", "name": "n1"},
    }
    status = await kube.post_subresource(PODS, "a", "binding", binding, namespace="default")
    assert status["status"] == "Success"
    bound = await kube.get(PODS, "a", namespace="default")
    assert bound["spec"]["nodeName"] == "n1"
    with pytest.raises(errors.ConflictError):
        await kube.post_subresource(PODS, "a", "binding", binding, namespace="default")


@pytest.mark.looptime  # the server ends the watch after 1 s of virtual time
async def test_watch_streams_changes_then_ends_on_timeout(kube: KubeClient) -> None:
    listing = await kube.list(PODS)
    await kube.create(PODS, pod("a"))
    await kube.patch(PODS, "a", {"metadata": {"labels": {"x": "y"}}}, namespace="default")
    await kube.delete(PODS, "a", namespace="default")
    seen: list[WatchEvent] = []
    async with kube.watch(
        PODS, resource_version=ObjectView(listing).resource_version, timeout_seconds=1
    ) as events:
        seen.extend([event async for event in events])
    changes = [(e.type, e.object["metadata"]["name"]) for e in seen if e.type != "BOOKMARK"]
    assert changes == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert all(e.object.get("kind") == "Pod" for e in seen if e.type != "BOOKMARK")


async def test_watch_from_a_compacted_version_reports_410(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    listing = await kube.list(PODS)
    await kube.create(PODS, pod("a"))
    sim.server.compact()
    async with kube.watch(
        PODS, resource_version=ObjectView(listing).resource_version, timeout_seconds=5
    ) as events:
        seen = [event async for event in events]
    assert [e.type for e in seen] == ["ERROR"]
    assert isinstance(errors.api_error(410, seen[0].object), errors.ExpiredError)


async def test_injected_server_error(sim: RunningApiServer, kube: KubeClient) -> None:
    sim.server.inject_error("get", "nodes", code=503, times=1)
    with pytest.raises(errors.ServerError) as caught:
        await kube.get(NODES, "n1")
    assert caught.value.status == 503
    with pytest.raises(errors.NotFoundError):
        await kube.get(NODES, "n1")


async def test_connection_refused_is_a_transport_error() -> None:
    settings = KubeSettings(kube_url="http://127.0.0.1:9", request_timeout_s=2.0)
    async with open_client(settings) as client:
        with pytest.raises(errors.TransportError) as caught:
            await client.list(NODES)
    assert caught.value.__cause__ is not None


async def test_rate_limited_client_still_works(sim: RunningApiServer) -> None:
    settings = KubeSettings(kube_url=sim.url, qps=1000.0, burst=2)
    async with open_client(settings) as client:
        for index in range(5):
            await client.create(NODES, node(f"n{index}"))
        assert len((await client.list(NODES))["items"]) == 5
