"""PodDisruptionBudgets (``policy/v1``) over HTTP, with kubernetes-asyncio: the stored shape,
validation, ``metadata.generation`` and the status subresource."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from hami_kubesim.testing import RunningApiServer


@pytest.fixture
async def policy(sim: RunningApiServer) -> client.PolicyV1Api:
    return client.PolicyV1Api(sim.api_client())


def pdb(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert isinstance(body, dict)
    return body


async def test_create_resets_status_and_sets_generation(
    policy: client.PolicyV1Api, sim: RunningApiServer
) -> None:
    body = pdb(minAvailable=2)
    body["status"] = {"disruptionsAllowed": 5, "currentHealthy": 5}
    created = await policy.create_namespaced_pod_disruption_budget("default", body)
    assert created.metadata.generation == 1
    stored = sim.server.get("poddisruptionbudgets", "web", namespace="default")
    assert stored["status"] == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    assert stored["spec"]["minAvailable"] == 2
    assert sim.server.get("pdb", "web", namespace="default")["kind"] == "PodDisruptionBudget"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param(
            {"minAvailable": "50x"},
            "spec.minAvailable",
            'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"50x"}: a valid percent '
            "string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
            "regex used for validation is '[0-9]+%')",
            id="not a percentage",
        ),
        pytest.param(
            {"maxUnavailable": "150%"},
            "spec.maxUnavailable",
            'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: must not be '
            "greater than 100%",
            id="above 100%",
        ),
        pytest.param(
            {"minAvailable": -1},
            "spec.minAvailable",
            "Invalid value: -1: must be greater than or equal to 0",
            id="negative",
        ),
        pytest.param(
            {"unhealthyPodEvictionPolicy": "Sometimes"},
            "spec.unhealthyPodEvictionPolicy",
            'Unsupported value: "Sometimes": supported values: "AlwaysAllow", "IfHealthyBudget"',
            id="eviction policy",
        ),
    ],
)
async def test_validation(
    policy: client.PolicyV1Api, spec: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ApiException) as info:
        await policy.create_namespaced_pod_disruption_budget("default", pdb(**spec))
    assert info.value.status == 422
    status = status_of(info.value)
    assert status["message"] == f'PodDisruptionBudget.policy "web" is invalid: {field}: {message}'
    assert status["details"]["causes"] == [
        {"reason": status["details"]["causes"][0]["reason"], "message": message, "field": field}
    ]


async def test_both_bounds_and_a_bad_selector_are_refused(policy: client.PolicyV1Api) -> None:
    with pytest.raises(ApiException) as info:
        await policy.create_namespaced_pod_disruption_budget(
            "default", pdb(minAvailable=1, maxUnavailable=1)
        )
    causes = status_of(info.value)["details"]["causes"]
    assert [c["field"] for c in causes] == ["spec"]
    assert causes[0]["message"].endswith("minAvailable and maxUnavailable cannot be both set")
    bad = pdb()
    bad["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "Near"}]}
    with pytest.raises(ApiException) as info:
        await policy.create_namespaced_pod_disruption_budget("default", bad)
    assert [c["field"] for c in status_of(info.value)["details"]["causes"]] == ["spec.selector"]


async def test_generation_follows_the_spec(
    policy: client.PolicyV1Api, sim: RunningApiServer
) -> None:
    await policy.create_namespaced_pod_disruption_budget("default", pdb(minAvailable=1))
    labelled = await policy.patch_namespaced_pod_disruption_budget(
        "web", "default", {"metadata": {"labels": {"team": "a"}}}
    )
    assert labelled.metadata.generation == 1
    changed = await policy.patch_namespaced_pod_disruption_budget(
        "web", "default", {"spec": {"minAvailable": "50%"}, "metadata": {"generation": 9}}
    )
    assert changed.metadata.generation == 2
    assert changed.spec.min_available == "50%"


async def test_status_subresource(policy: client.PolicyV1Api, sim: RunningApiServer) -> None:
    await policy.create_namespaced_pod_disruption_budget("default", pdb(minAvailable=1))
    condition = {
        "type": "DisruptionAllowed",
        "status": "True",
        "reason": "SufficientPods",
        "message": "",
        "observedGeneration": 1,
        "lastTransitionTime": "2024-01-01T00:00:00Z",
    }
    written = await policy.patch_namespaced_pod_disruption_budget_status(
        "web",
        "default",
        {
            "spec": {"minAvailable": 3},  # ignored: status writes keep the spec
            "status": {
                "currentHealthy": 2,
                "desiredHealthy": 1,
                "expectedPods": 2,
                "disruptionsAllowed": 1,
                "observedGeneration": 1,
                "disruptedPods": {"web-0": "2024-01-01T00:00:00Z"},
                "conditions": [condition],
            },
        },
    )
    assert written.spec.min_available == 1
    assert written.metadata.generation == 1
    assert written.status.disruptions_allowed == 1
    stored = sim.server.get("poddisruptionbudgets", "web", namespace="default")
    assert stored["status"]["disruptedPods"] == {"web-0": "2024-01-01T00:00:00Z"}
    # Conditions merge by type (strategic merge patch).
    await policy.patch_namespaced_pod_disruption_budget_status(
        "web",
        "default",
        {"status": {"conditions": [{**condition, "type": "Other"}]}},
    )
    stored = sim.server.get("poddisruptionbudgets", "web", namespace="default")
    assert [c["type"] for c in stored["status"]["conditions"]] == ["DisruptionAllowed", "Other"]
    with pytest.raises(ApiException) as info:
        await policy.patch_namespaced_pod_disruption_budget_status(
            "web", "default", {"status": {"conditions": [{"type": "Bare", "status": "Maybe"}]}}
        )
    assert [c["field"] for c in status_of(info.value)["details"]["causes"]] == [
        "status.conditions[2].status",
        "status.conditions[2].lastTransitionTime",
        "status.conditions[2].reason",
    ]
    with pytest.raises(ApiException) as info:
        await policy.patch_namespaced_pod_disruption_budget_status(
            "web", "default", {"status": {"disruptionsAllowed": -1}}
        )
    assert status_of(info.value)["message"] == (
        'PodDisruptionBudget.policy "web" is invalid: status.disruptionsAllowed: '
        "Invalid value: -1: must be greater than or equal to 0"
    )


async def test_discovery_and_openapi(sim: RunningApiServer) -> None:
    async with aiohttp.ClientSession(base_url=sim.url) as http:
        async with http.get("/apis/policy/v1") as resp:
            policy_v1 = await resp.json()
        async with http.get("/apis/scheduling.k8s.io/v1") as resp:
            scheduling_v1 = await resp.json()
        async with http.get("/apis") as resp:
            groups = {g["name"] for g in (await resp.json())["groups"]}
        async with http.get("/openapi/v3") as resp:
            paths = set((await resp.json())["paths"])
    by_name = {r["name"]: r for r in policy_v1["resources"]}
    assert by_name["poddisruptionbudgets"]["shortNames"] == ["pdb"]
    assert by_name["poddisruptionbudgets"]["namespaced"] is True
    assert by_name["poddisruptionbudgets/status"]["verbs"] == ["get", "patch", "update"]
    [pcs] = scheduling_v1["resources"]
    assert (pcs["name"], pcs["kind"], pcs["namespaced"], pcs["shortNames"]) == (
        "priorityclasses",
        "PriorityClass",
        False,
        ["pc"],
    )
    assert {"policy", "scheduling.k8s.io"} <= groups
    assert {"apis/policy/v1", "apis/scheduling.k8s.io/v1"} <= paths
