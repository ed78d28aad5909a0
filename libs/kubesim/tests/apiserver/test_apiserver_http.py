"""Fidelity over HTTP with kubernetes-asyncio: CRUD, error bodies, conflicts, leases, patch
types, binding, selectors, discovery, paging, admission, dry run, tables."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hami_kubesim.apiserver.hooks import AdmissionDenied
from hami_kubesim.testing import RunningApiServer, running_apiserver


@pytest.fixture
async def core(sim: RunningApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(sim.api_client())


@pytest.fixture
async def http(sim: RunningApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=sim.url) as session:
        yield session


def pod(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, **meta},
        "spec": {"containers": [{"name": "c", "image": "img:1"}]},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert isinstance(body, dict)
    return body


async def test_crud_round_trip_with_defaults(core: client.CoreV1Api) -> None:
    created = await core.create_namespaced_pod("default", pod("web"))
    assert created.metadata.namespace == "default"
    assert created.status.phase == "Pending"
    assert created.spec.scheduler_name == "default-scheduler"
    read = await core.read_namespaced_pod("web", "default")
    assert read.metadata.uid == created.metadata.uid
    assert read.metadata.resource_version == created.metadata.resource_version
    deleted = await core.delete_namespaced_pod("web", "default")
    assert deleted.metadata.name == "web"
    with pytest.raises(ApiException) as info:
        await core.read_namespaced_pod("web", "default")
    assert status_of(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "web" not found',
        "reason": "NotFound",
        "details": {"name": "web", "kind": "pods"},
        "code": 404,
    }


async def test_list_shape_and_one_counter(
    core: client.CoreV1Api, http: aiohttp.ClientSession
) -> None:
    node = await core.create_node({"metadata": {"name": "n1"}})
    cm = await core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    assert int(cm.metadata.resource_version) == int(node.metadata.resource_version) + 1
    async with http.get("/api/v1/nodes") as resp:
        body = await resp.json()
    assert body["kind"] == "NodeList"
    assert body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == cm.metadata.resource_version
    assert body["items"][0]["metadata"]["name"] == "n1"
    assert "kind" not in body["items"][0]
    assert "apiVersion" not in body["items"][0]
    async with http.get("/api/v1/nodes/n1") as resp:
        single = await resp.json()
    assert single["kind"] == "Node"
    assert single["apiVersion"] == "v1"


async def test_already_exists_and_stale_update(core: client.CoreV1Api) -> None:
    cm = await core.create_namespaced_config_map(
        "default", {"metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    assert info.value.status == 409
    assert status_of(info.value)["reason"] == "AlreadyExists"
    cm.data = {"a": "2"}
    fresh = await core.replace_namespaced_config_map("c", "default", cm)
    assert int(fresh.metadata.resource_version) > int(cm.metadata.resource_version)
    cm.data = {"a": "3"}
    with pytest.raises(ApiException) as info:
        await core.replace_namespaced_config_map("c", "default", cm)
    body = status_of(info.value)
    assert body["code"] == 409
    assert body["reason"] == "Conflict"
    assert body["message"].startswith(
        'Operation cannot be fulfilled on configmaps "c": the object has been modified'
    )
    assert body["details"] == {"name": "c", "kind": "configmaps"}


async def test_lease_update_rules_and_micro_time(sim: RunningApiServer) -> None:
    leases = client.CoordinationV1Api(sim.api_client())
    spec = {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "renewTime": "2026-07-24T10:15:30.123456Z",
    }
    lease = await leases.create_namespaced_lease(
        "kube-system", {"metadata": {"name": "lock"}, "spec": spec}
    )
    assert lease.spec.renew_time.microsecond == 123456
    raw = sim.server.get("leases", "lock", namespace="kube-system")
    assert raw["spec"]["renewTime"] == "2026-07-24T10:15:30.123456Z"
    lease.spec.holder_identity = "b"
    stale = lease.metadata.resource_version
    updated = await leases.replace_namespaced_lease("lock", "kube-system", lease)
    assert updated.spec.holder_identity == "b"
    lease.metadata.resource_version = stale
    with pytest.raises(ApiException) as info:
        await leases.replace_namespaced_lease("lock", "kube-system", lease)
    assert info.value.status == 409
    assert status_of(info.value)["details"] == {
        "name": "lock",
        "group": "coordination.k8s.io",
        "kind": "leases",
    }
    lease.metadata.resource_version = None
    with pytest.raises(ApiException) as info:
        await leases.replace_namespaced_lease("lock", "kube-system", lease)
    body = status_of(info.value)
    assert body["code"] == 422
    assert body["reason"] == "Invalid"
    assert "metadata.resourceVersion" in body["message"]
    assert "must be specified for an update" in body["message"]


async def test_patch_content_types(core: client.CoreV1Api, http: aiohttp.ClientSession) -> None:
    await core.create_namespaced_pod("default", pod("p", annotations={"keep": "1", "drop": "1"}))
    strategic = await core.patch_namespaced_pod(
        "p", "default", {"metadata": {"annotations": {"new": "1", "drop": None}}}
    )
    assert strategic.metadata.annotations == {"keep": "1", "new": "1"}
    as_json = await core.patch_namespaced_pod(
        "p", "default", [{"op": "add", "path": "/metadata/labels", "value": {"l": "v"}}]
    )
    assert as_json.metadata.labels == {"l": "v"}
    headers = {"Content-Type": "application/merge-patch+json; charset=utf-8"}
    async with http.patch(
        "/api/v1/namespaces/default/pods/p",
        json={"metadata": {"labels": {"m": "1"}}},
        headers=headers,
    ) as resp:
        assert resp.status == 200
        assert (await resp.json())["metadata"]["labels"] == {"l": "v", "m": "1"}
    async with http.patch(
        "/api/v1/namespaces/default/pods/p",
        data=b"{}",
        headers={"Content-Type": "application/apply-patch+yaml"},
    ) as resp:
        assert resp.status == 415
    async with http.patch(
        "/api/v1/namespaces/default/pods/p", data=b"{nope", headers=headers
    ) as resp:
        assert resp.status == 400
    with pytest.raises(ApiException) as info:
        await core.patch_namespaced_pod(
            "p", "default", [{"op": "test", "path": "/metadata/name", "value": "q"}]
        )
    assert info.value.status == 422
    before = (await core.read_namespaced_pod("p", "default")).metadata.resource_version
    same = await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"m": "1"}}})
    assert same.metadata.resource_version == before
    with pytest.raises(ApiException) as info:
        await core.patch_namespaced_pod(
            "p", "default", {"metadata": {"resourceVersion": "1", "labels": {"z": "1"}}}
        )
    assert info.value.status == 409


async def test_binding_subresource(core: client.CoreV1Api, http: aiohttp.ClientSession) -> None:
    await core.create_namespaced_pod("default", pod("p"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"kind": "Node", "name": "n1"},
    }
    url = "/api/v1/namespaces/default/pods/p/binding"
    async with http.post(url, json=binding) as resp:
        assert resp.status == 201
        assert await resp.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
    bound = await core.read_namespaced_pod("p", "default")
    assert bound.spec.node_name == "n1"
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    async with http.post(url, json=binding) as resp:
        body = await resp.json()
        assert resp.status == 409
        assert body["details"] == {"name": "p", "kind": "pods/binding"}
    async with http.post(url, json={**binding, "metadata": {"name": "other"}}) as resp:
        assert resp.status == 400
        assert (await resp.json())["message"] == "name in URL does not match name in Binding object"
    async with http.post(
        "/api/v1/namespaces/default/pods/ghost/binding",
        json={**binding, "metadata": {"name": "ghost"}},
    ) as resp:
        assert resp.status == 404
    await core.create_namespaced_pod("default", pod("q"))
    async with http.post(
        "/api/v1/namespaces/default/bindings", json={**binding, "metadata": {"name": "q"}}
    ) as resp:
        assert resp.status == 201
    assert (await core.read_namespaced_pod("q", "default")).spec.node_name == "n1"


async def test_status_subresource(core: client.CoreV1Api) -> None:
    await core.create_namespaced_pod("default", pod("p"))
    patched = await core.patch_namespaced_pod_status(
        "p", "default", {"status": {"phase": "Running"}, "spec": {"nodeName": "sneaky"}}
    )
    assert patched.status.phase == "Running"
    assert patched.spec.node_name is None
    ignored = await core.patch_namespaced_pod("p", "default", {"status": {"phase": "Failed"}})
    assert ignored.status.phase == "Running"
    await core.create_node({"metadata": {"name": "n"}})
    node = await core.patch_node_status("n", {"status": {"capacity": {"nvidia.com/gpu": "4"}}})
    assert node.status.capacity == {"nvidia.com/gpu": "4"}


async def test_selectors_over_http(core: client.CoreV1Api, sim: RunningApiServer) -> None:
    for name, team in (("a", "ml"), ("b", "web"), ("c", "ml")):
        await core.create_namespaced_pod("default", pod(name, labels={"team": team}))
    await sim.server.bind("default", "c", "n1")
    ml = await core.list_namespaced_pod("default", label_selector="team in (ml)")
    assert [p.metadata.name for p in ml.items] == ["a", "c"]
    not_web = await core.list_pod_for_all_namespaces(label_selector="team!=web,!missing")
    assert [p.metadata.name for p in not_web.items] == ["a", "c"]
    on_node = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in on_node.items] == ["c"]
    pending = await core.list_namespaced_pod(
        "default", field_selector="status.phase=Pending,metadata.name!=a"
    )
    assert [p.metadata.name for p in pending.items] == ["b", "c"]
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_pod("default", field_selector="spec.bogus=1")
    assert info.value.status == 400
    assert "field label not supported" in status_of(info.value)["message"]
    with pytest.raises(ApiException) as info:
        await core.list_namespaced_pod("default", label_selector="team in (")
    assert info.value.status == 400


async def test_paging(core: client.CoreV1Api) -> None:
    for i in range(5):
        await core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    first = await core.list_namespaced_config_map("default", limit=2)
    assert [c.metadata.name for c in first.items] == ["c0", "c1"]
    assert first.metadata.remaining_item_count == 3
    names = [c.metadata.name for c in first.items]
    token = first.metadata._continue
    while token:
        page = await core.list_namespaced_config_map("default", limit=2, _continue=token)
        names += [c.metadata.name for c in page.items]
        assert page.metadata.resource_version == first.metadata.resource_version
        token = page.metadata._continue
    assert names == [f"c{i}" for i in range(5)]


async def test_other_kinds(sim: RunningApiServer, core: client.CoreV1Api) -> None:
    hooks = client.AdmissionregistrationV1Api(sim.api_client())
    config = {
        "metadata": {"name": "vgpu"},
        "webhooks": [
            {
                "name": "vgpu.example.com",
                "clientConfig": {"url": "https://127.0.0.1:9443/mutate"},
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
            }
        ],
    }
    created = await hooks.create_mutating_webhook_configuration(config)
    assert created.webhooks[0].failure_policy == "Fail"
    listed = await hooks.list_mutating_webhook_configuration()
    assert [m.metadata.name for m in listed.items] == ["vgpu"]
    event = {
        "metadata": {"generateName": "p."},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Scheduled",
        "message": "assigned",
        "type": "Normal",
    }
    await core.create_namespaced_event("default", event)
    found = await core.list_namespaced_event(
        "default", field_selector="involvedObject.name=p,reason=Scheduled"
    )
    assert [e.reason for e in found.items] == ["Scheduled"]
    events_v1 = client.EventsV1Api(sim.api_client())
    new_event = {
        "metadata": {"name": "e1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "x",
        "reportingInstance": "y",
        "action": "Bind",
        "reason": "Scheduled",
        "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
    }
    assert (await events_v1.create_namespaced_event("default", new_event)).metadata.name == "e1"
    quota = await core.create_namespaced_resource_quota(
        "default", {"metadata": {"name": "q"}, "spec": {"hard": {"nvidia.com/gpu": 2}}}
    )
    assert quota.spec.hard == {"nvidia.com/gpu": "2"}


async def test_discovery_documents(sim: RunningApiServer, http: aiohttp.ClientSession) -> None:
    version = await client.VersionApi(sim.api_client()).get_code()
    assert version.major == "1"
    async with http.get("/api") as resp:
        assert (await resp.json())["versions"] == ["v1"]
    async with http.get("/apis") as resp:
        groups = {g["name"] for g in (await resp.json())["groups"]}
    assert {"coordination.k8s.io", "admissionregistration.k8s.io", "events.k8s.io"} <= groups
    async with http.get("/api/v1") as resp:
        resources = {r["name"]: r for r in (await resp.json())["resources"]}
    assert {"pods", "pods/status", "pods/binding", "nodes", "nodes/status", "namespaces"} <= set(
        resources
    )
    assert resources["pods"]["namespaced"]
    assert not resources["nodes"]["namespaced"]
    assert resources["pods"]["shortNames"] == ["po"]
    async with http.get("/apis/coordination.k8s.io/v1") as resp:
        assert [r["name"] for r in (await resp.json())["resources"]] == ["leases"]
    for missing in (
        "/apis/nope.io/v1",
        "/api/v1/namespaces/default/nodes",
        "/api/v1/pods/x",
        "/openapi/v2",
    ):
        async with http.get(missing) as resp:
            assert resp.status == 404, missing


async def test_injected_errors_and_latency(
    sim: RunningApiServer, core: client.CoreV1Api, http: aiohttp.ClientSession
) -> None:
    sim.server.inject_error("create", "pods", code=500, times=1)
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod("p"))
    body = status_of(info.value)
    assert (body["code"], body["reason"], body["status"]) == (500, "InternalError", "Failure")
    await core.create_namespaced_pod("default", pod("p"))
    sim.server.inject_error("get", "pods", code=429, times=1)
    async with http.get("/api/v1/namespaces/default/pods/p") as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "1"
        assert (await resp.json())["details"] == {"retryAfterSeconds": 1}
    sim.server.clear_faults()
    sim.server.inject_latency(0.05, "list", "nodes")
    loop = __import__("asyncio").get_running_loop()
    start = loop.time()
    await core.list_node()
    assert loop.time() - start >= 0.05


async def test_fault_plan_over_http(http: aiohttp.ClientSession) -> None:
    plan = {
        "seed": 7,
        "errors": [{"verb": "get", "resource": "namespaces", "code": 503, "times": 2}],
    }
    async with http.post("/_sim/faults", json=plan) as resp:
        assert resp.status == 200
    codes = []
    for _ in range(3):
        async with http.get("/api/v1/namespaces/default") as resp:
            codes.append(resp.status)
    assert codes == [503, 503, 200]
    async with http.get("/_sim/faults") as resp:
        assert (await resp.json())["errors"][0]["fired"] == 2
    async with http.post("/_sim/faults", json={"errors": [{"bogus": 1}]}) as resp:
        assert resp.status == 400

    async def pattern() -> list[int]:
        async with http.post(
            "/_sim/faults", json={"seed": 3, "errors": [{"verb": "list", "rate": 0.5}]}
        ):
            pass
        out = []
        for _ in range(12):
            async with http.get("/api/v1/nodes") as resp:
                out.append(resp.status)
        return out

    first, second = await pattern(), await pattern()
    assert first == second
    assert 500 in first
    assert 200 in first
    async with http.delete("/_sim/faults") as resp:
        assert (await resp.json())["errors"] == []
    async with http.get("/_sim/stats") as resp:
        assert (await resp.json())["objects"]["namespaces"] == 4


async def test_admission_mutates_and_denies() -> None:
    seen: list[dict[str, Any]] = []

    async def admission(
        op: str,
        resource: str,
        obj: dict[str, Any],
        namespace: str | None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        seen.append(json.loads(json.dumps(obj)))
        if obj["metadata"].get("labels", {}).get("deny") == "yes":
            raise AdmissionDenied(
                403, 'admission webhook "vgpu.example.com" denied the request: no'
            )
        obj["metadata"].setdefault("annotations", {})["mutated"] = "true"
        return obj

    async with running_apiserver(admission=admission) as sim:
        core = client.CoreV1Api(sim.api_client())
        created = await core.create_namespaced_pod(
            "default", {**pod(""), "metadata": {"generateName": "w-"}}
        )
        assert created.metadata.annotations == {"mutated": "true"}
        assert seen[0]["kind"] == "Pod"
        assert "uid" not in seen[0]["metadata"]
        assert "name" not in seen[0]["metadata"]
        assert seen[0]["metadata"]["namespace"] == "default"
        with pytest.raises(ApiException) as info:
            await core.create_namespaced_pod("default", pod("d", labels={"deny": "yes"}))
        body = status_of(info.value)
        assert (body["code"], body["reason"]) == (403, "Forbidden")
        assert body["message"] == 'admission webhook "vgpu.example.com" denied the request: no'
        await core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
        assert len(seen) == 2  # only pods go through admission


async def test_dry_run_and_table(core: client.CoreV1Api, http: aiohttp.ClientSession) -> None:
    async with http.post("/api/v1/namespaces/default/pods?dryRun=All", json=pod("dry")) as resp:
        assert resp.status == 201
    assert (await core.list_namespaced_pod("default")).items == []
    await core.create_namespaced_pod("default", pod("p"))
    headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    async with http.get("/api/v1/namespaces/default/pods", headers=headers) as resp:
        table = await resp.json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert table["rows"][0]["cells"][:3] == ["p", "0/1", "Pending"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
