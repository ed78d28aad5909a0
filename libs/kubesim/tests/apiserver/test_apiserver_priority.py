"""PriorityClasses and the Priority admission plugin over HTTP, with kubernetes-asyncio:
the two system classes at start, defaults, validation, the single ``globalDefault``, and pods
getting ``spec.priority`` / ``spec.preemptionPolicy`` from their class before the webhooks."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hami_kubesim.testing import RunningApiServer, running_apiserver

PCS = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture
async def core(sim: RunningApiServer) -> client.CoreV1Api:
    return client.CoreV1Api(sim.api_client())


@pytest.fixture
async def scheduling(sim: RunningApiServer) -> client.SchedulingV1Api:
    return client.SchedulingV1Api(sim.api_client())


def pc(name: str, value: int, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "img:1"}], **spec},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert isinstance(body, dict)
    return body


async def raw_json(sim: RunningApiServer, path: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(sim.url + path) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert isinstance(body, dict)
    return body


async def test_system_classes_exist_at_start(sim: RunningApiServer) -> None:
    listed = await raw_json(sim, PCS)
    assert listed["kind"] == "PriorityClassList"
    by_name = {item["metadata"]["name"]: item for item in listed["items"]}
    assert sorted(by_name) == ["system-cluster-critical", "system-node-critical"]
    node = by_name["system-node-critical"]
    assert node["value"] == 2000001000
    assert node["preemptionPolicy"] == "PreemptLowerPriority"
    assert node["description"] == (
        "Used for system critical pods that must not be moved from their current node."
    )
    assert "globalDefault" not in node
    assert by_name["system-cluster-critical"]["value"] == 2000000000


async def test_create_defaults(scheduling: client.SchedulingV1Api, sim: RunningApiServer) -> None:
    await scheduling.create_priority_class(pc("batch", 1000, globalDefault=False))
    stored = await raw_json(sim, f"{PCS}/batch")
    assert stored["apiVersion"] == "scheduling.k8s.io/v1"
    assert stored["value"] == 1000
    assert stored["preemptionPolicy"] == "PreemptLowerPriority"
    assert stored["metadata"]["generation"] == 1
    assert "globalDefault" not in stored  # false is omitted, as Go's omitempty does


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        pytest.param(
            pc("huge", 1_000_000_001),
            "value",
            "Forbidden: maximum allowed value of a user defined priority is 1000000000",
            id="value above the user maximum",
        ),
        pytest.param(
            pc("system-mine", 5),
            "metadata.name",
            "Forbidden: priority class names with 'system-' prefix are reserved for system use "
            "only. error: system-mine is not a known system priority class",
            id="reserved prefix",
        ),
        pytest.param(
            pc("system-node-critical", 5),
            "metadata.name",
            "Forbidden: priority class names with 'system-' prefix are reserved for system use "
            "only. error: value of system-node-critical PriorityClass must be 2000001000",
            id="system class with another value",
        ),
        pytest.param(
            pc("odd", 5, preemptionPolicy="Sometimes"),
            "preemptionPolicy",
            'Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never"',
            id="unknown preemption policy",
        ),
    ],
)
async def test_validation(
    scheduling: client.SchedulingV1Api, body: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ApiException) as info:
        await scheduling.create_priority_class(body)
    assert info.value.status == 422
    status = status_of(info.value)
    assert status["reason"] == "Invalid"
    name = body["metadata"]["name"]
    assert status["message"] == f'PriorityClass.scheduling.k8s.io "{name}" is invalid: ' + (
        f"{field}: {message}"
    )
    assert [c["field"] for c in status["details"]["causes"]] == [field]


async def test_value_and_policy_are_immutable(scheduling: client.SchedulingV1Api) -> None:
    await scheduling.create_priority_class(pc("batch", 1000))
    with pytest.raises(ApiException) as info:
        await scheduling.patch_priority_class("batch", {"value": 2000})
    assert info.value.status == 422
    assert status_of(info.value)["message"] == (
        'PriorityClass.scheduling.k8s.io "batch" is invalid: '
        "value: Forbidden: may not be changed in an update."
    )
    with pytest.raises(ApiException) as info:
        await scheduling.patch_priority_class("batch", {"preemptionPolicy": "Never"})
    assert status_of(info.value)["message"] == (
        'PriorityClass.scheduling.k8s.io "batch" is invalid: '
        'preemptionPolicy: Invalid value: "Never": field is immutable'
    )
    described = await scheduling.patch_priority_class("batch", {"description": "batch jobs"})
    assert described.description == "batch jobs"


async def test_only_one_global_default(scheduling: client.SchedulingV1Api) -> None:
    await scheduling.create_priority_class(pc("first", 10, globalDefault=True))
    with pytest.raises(ApiException) as info:
        await scheduling.create_priority_class(pc("second", 20, globalDefault=True))
    assert status_of(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'priorityclasses.scheduling.k8s.io "second" is forbidden: PriorityClass first '
        "is already marked as default. Only one default can exist",
        "reason": "Forbidden",
        "details": {"name": "second", "group": "scheduling.k8s.io", "kind": "priorityclasses"},
        "code": 403,
    }
    await scheduling.create_priority_class(pc("third", 30))
    with pytest.raises(ApiException) as info:
        await scheduling.patch_priority_class("third", {"globalDefault": True})
    assert info.value.status == 403
    # The default itself may be written again.
    updated = await scheduling.patch_priority_class("first", {"description": "the default"})
    assert updated.global_default is True


async def test_system_classes_cannot_be_deleted(
    scheduling: client.SchedulingV1Api, sim: RunningApiServer
) -> None:
    with pytest.raises(ApiException) as info:
        await scheduling.delete_priority_class("system-node-critical")
    assert info.value.status == 403
    assert status_of(info.value)["message"] == (
        'priorityclasses.scheduling.k8s.io "system-node-critical" is forbidden: this is a '
        "system priority class and cannot be deleted"
    )
    await scheduling.create_priority_class(pc("batch", 1000))
    await scheduling.delete_priority_class("batch")
    # DELETE of the collection goes through the generic store, which has no such guard.
    await scheduling.delete_collection_priority_class()
    assert sim.server.list("priorityclasses") == []


async def test_pod_without_class_gets_zero(core: client.CoreV1Api) -> None:
    created = await core.create_namespaced_pod("default", pod("plain"))
    assert created.spec.priority == 0
    assert created.spec.preemption_policy == "PreemptLowerPriority"
    assert created.spec.priority_class_name is None


async def test_pod_gets_its_class(
    core: client.CoreV1Api, scheduling: client.SchedulingV1Api
) -> None:
    await scheduling.create_priority_class(pc("gentle", 500, preemptionPolicy="Never"))
    created = await core.create_namespaced_pod("default", pod("p", priorityClassName="gentle"))
    assert (created.spec.priority, created.spec.preemption_policy) == (500, "Never")
    # System classes are not limited to kube-system (that check went away in 1.17).
    critical = await core.create_namespaced_pod(
        "default", pod("c", priorityClassName="system-node-critical")
    )
    assert critical.spec.priority == 2000001000
    # A pod may repeat what its class gives.
    same = await core.create_namespaced_pod(
        "default", pod("s", priorityClassName="gentle", priority=500, preemptionPolicy="Never")
    )
    assert same.spec.priority == 500


async def test_pod_without_class_gets_the_global_default(
    core: client.CoreV1Api, scheduling: client.SchedulingV1Api
) -> None:
    await scheduling.create_priority_class(
        pc("house", 100, globalDefault=True, preemptionPolicy="Never")
    )
    created = await core.create_namespaced_pod("default", pod("p"))
    assert created.spec.priority_class_name == "house"
    assert (created.spec.priority, created.spec.preemption_policy) == (100, "Never")
    # The default's policy is computed, so a pod naming another one is refused.
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod(
            "default", pod("q", preemptionPolicy="PreemptLowerPriority")
        )
    assert status_of(info.value)["message"] == (
        'pods "q" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) must '
        "not be provided in pod spec; priority admission controller computed Never from the "
        "given PriorityClass name"
    )


async def test_unknown_class_is_forbidden(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod("p", priorityClassName="missing"))
    assert status_of(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "p" is forbidden: no PriorityClass with name missing was found',
        "reason": "Forbidden",
        "details": {"name": "p", "kind": "pods"},
        "code": 403,
    }
    body = pod("", priorityClassName="missing")
    body["metadata"] = {"generateName": "web-"}
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", body)
    assert status_of(info.value)["message"].startswith('pods "web-" is forbidden: ')


async def test_pod_may_not_set_another_priority(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        await core.create_namespaced_pod("default", pod("p", priority=7))
    assert info.value.status == 403
    assert status_of(info.value)["message"] == (
        'pods "p" is forbidden: the integer value of priority (7) must not be provided in pod '
        "spec; priority admission controller computed 0 from the given PriorityClass name"
    )


async def test_webhooks_see_the_resolved_priority() -> None:
    seen: list[dict[str, Any]] = []

    async def admission(
        op: str,
        resource: str,
        obj: dict[str, Any],
        namespace: str | None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        seen.append(obj)
        return obj

    async with running_apiserver(admission=admission) as sim:
        await sim.server.create(
            "priorityclasses", {"metadata": {"name": "high"}, "value": 1_000_000}
        )
        await sim.server.create("pods", pod("p", priorityClassName="high"), namespace="default")
    assert seen[0]["spec"]["priority"] == 1_000_000
    assert seen[0]["spec"]["preemptionPolicy"] == "PreemptLowerPriority"


async def test_updates_keep_the_priority(
    core: client.CoreV1Api, scheduling: client.SchedulingV1Api, sim: RunningApiServer
) -> None:
    await scheduling.create_priority_class(pc("high", 1000))
    created = await core.create_namespaced_pod("default", pod("p", priorityClassName="high"))
    # A PUT of the manifest as written (no priority) keeps the one admission computed.
    body = pod("p", priorityClassName="high")
    body["metadata"]["resourceVersion"] = created.metadata.resource_version
    body["metadata"]["labels"] = {"a": "b"}
    replaced = await core.replace_namespaced_pod("p", "default", body)
    assert (replaced.spec.priority, replaced.metadata.labels) == (1000, {"a": "b"})
    with pytest.raises(ApiException) as info:
        await core.patch_namespaced_pod("p", "default", {"spec": {"priority": 5}})
    assert info.value.status == 422
    restored = sim.server.restore("pods", pod("old", priorityClassName="high"))
    assert restored["spec"]["priority"] == 1000
