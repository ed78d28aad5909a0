"""The disruption controller stand-in against the API server: budget status from the pods it
selects, the fail-safe, ``status.disruptedPods`` and stale ``DisruptionTarget`` conditions.

On virtual time: the controller reads wall-clock time from a clock that follows the loop, so
the two-minute timeouts pass at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami_kube.timefmt import format_time
from hami_kubesim.controllers.disruption import DisruptionController
from hami_kubesim.testing import RunningApiServer, eventually

pytestmark = [pytest.mark.looptime, pytest.mark.timeout(60)]

NODE = "node-a"


@pytest.fixture
async def clock() -> Callable[[], datetime]:
    loop = asyncio.get_running_loop()
    start, base = loop.time(), datetime.now(UTC)
    return lambda: base + timedelta(seconds=loop.time() - start)


@pytest.fixture
async def controller(
    sim: RunningApiServer, clock: Callable[[], datetime]
) -> AsyncIterator[DisruptionController]:
    async with DisruptionController(sim.url, clock=clock) as running:
        yield running


def running_pod(name: str, *, ready: bool = True, app: str = "web", **meta: Any) -> dict[str, Any]:
    stamp = "2024-01-01T00:00:00Z"
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}, **meta},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "img:1"}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": str(ready), "lastTransitionTime": stamp},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
            ],
        },
    }


async def make_budget(sim: RunningApiServer, name: str = "web", **spec: Any) -> None:
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    body = {"metadata": {"name": name, "namespace": "default"}, "spec": spec}
    await sim.server.create("poddisruptionbudgets", body)


def status(sim: RunningApiServer, name: str = "web") -> dict[str, Any]:
    found = sim.server.get("poddisruptionbudgets", name, namespace="default")["status"]
    assert isinstance(found, dict)
    return found


def counts(sim: RunningApiServer, name: str = "web") -> tuple[int, int, int, int]:
    now = status(sim, name)
    return (
        now["currentHealthy"],
        now["desiredHealthy"],
        now["expectedPods"],
        now["disruptionsAllowed"],
    )


def event_reasons(sim: RunningApiServer) -> list[tuple[str, str, str]]:
    return [
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"])
        for e in sim.server.list("events", namespace="default")
    ]


async def test_status_follows_the_pods(
    sim: RunningApiServer, controller: DisruptionController
) -> None:
    for name in ("web-0", "web-1", "web-2"):
        sim.server.restore("pods", running_pod(name))
    sim.server.restore("pods", running_pod("db-0", app="db"))
    await make_budget(sim, minAvailable=2)
    await eventually(lambda: counts(sim) == (3, 2, 3, 1))
    first = status(sim)
    assert first["observedGeneration"] == 1
    [condition] = first["conditions"]
    assert {k: v for k, v in condition.items() if k != "lastTransitionTime"} == {
        "type": "DisruptionAllowed",
        "status": "True",
        "reason": "SufficientPods",
        "message": "",
        "observedGeneration": 1,
    }
    # A pod that is not ready is not healthy.
    await sim.server.patch(
        "pods",
        "web-2",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        namespace="default",
        subresource="status",
    )
    await eventually(lambda: counts(sim) == (2, 2, 3, 0))
    assert status(sim)["conditions"][0]["reason"] == "InsufficientPods"
    # Nor is one being deleted (held here by a finalizer); it still counts as expected.
    keep = running_pod("web-3", finalizers=["example.com/keep"])
    sim.server.restore("pods", keep)
    await eventually(lambda: counts(sim) == (3, 2, 4, 1))
    await sim.server.delete("pods", "web-3", namespace="default")
    await eventually(lambda: counts(sim) == (2, 2, 4, 0))
    # A change of the spec is observed.
    await sim.server.patch(
        "poddisruptionbudgets", "web", {"spec": {"minAvailable": 1}}, namespace="default"
    )
    await eventually(lambda: counts(sim) == (2, 1, 4, 1) and status(sim)["observedGeneration"] == 2)


async def test_max_unavailable_over_unmanaged_pods(
    sim: RunningApiServer, controller: DisruptionController
) -> None:
    sim.server.restore("pods", running_pod("web-0"))
    await make_budget(sim, maxUnavailable=1)
    # No controller gives a scale: nothing is expected, so nothing may be disrupted.
    await eventually(lambda: status(sim).get("conditions") is not None)
    assert counts(sim) == (1, 0, 0, 0)
    await eventually(lambda: ("PodDisruptionBudget", "web", "UnmanagedPods") in event_reasons(sim))
    # (A NoPods Event may come first, when the budget's watch event beats the pod's.)
    [event] = [
        e for e in sim.server.list("events", namespace="default") if e["reason"] == "UnmanagedPods"
    ]
    assert event["type"] == "Warning"
    assert event["source"] == {"component": "controllermanager"}
    assert event["message"].startswith(
        "Pods selected by this PodDisruptionBudget (selector: &LabelSelector{MatchLabels:"
        "map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{},}) were "
        "found to be unmanaged."
    )


async def test_a_pod_whose_controller_is_unknown_fails_safe(
    sim: RunningApiServer, controller: DisruptionController
) -> None:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web-abc",
        "uid": "6b1f6c1e-0000-4000-8000-000000000001",
        "controller": True,
    }
    sim.server.restore("pods", running_pod("web-0", ownerReferences=[owner]))
    await make_budget(sim, minAvailable="50%")
    await eventually(lambda: bool(status(sim).get("conditions")))
    [condition] = status(sim)["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "SyncFailed",
        'found no controllers for pod "web-0"',
    )
    assert status(sim)["disruptionsAllowed"] == 0
    await eventually(
        lambda: (
            ("PodDisruptionBudget", "web", "CalculateExpectedPodCountFailed") in event_reasons(sim)
        )
    )


async def test_selectors(sim: RunningApiServer, controller: DisruptionController) -> None:
    sim.server.restore("pods", running_pod("web-0"))
    sim.server.restore("pods", running_pod("db-0", app="db"))
    await sim.server.create("namespaces", {"metadata": {"name": "other"}})
    elsewhere = running_pod("web-x")
    elsewhere["metadata"]["namespace"] = "other"
    sim.server.restore("pods", elsewhere)
    await make_budget(sim, "all", minAvailable=1, selector={})
    await make_budget(sim, "none", minAvailable=1, selector=None)
    await eventually(lambda: counts(sim, "all") == (2, 1, 2, 1))
    await eventually(lambda: bool(status(sim, "none").get("conditions")))
    assert counts(sim, "none") == (0, 1, 0, 0)
    await eventually(lambda: ("PodDisruptionBudget", "none", "NoPods") in event_reasons(sim))


async def test_disrupted_pods_are_awaited_two_minutes(
    sim: RunningApiServer, controller: DisruptionController, clock: Callable[[], datetime]
) -> None:
    for name in ("web-0", "web-1", "web-2"):
        sim.server.restore("pods", running_pod(name))
    await make_budget(sim, minAvailable=1)
    await eventually(lambda: counts(sim) == (3, 1, 3, 2))
    now = clock()
    recent, old = format_time(now - timedelta(seconds=60)), format_time(now - timedelta(minutes=5))
    await sim.server.patch(
        "poddisruptionbudgets",
        "web",
        {"status": {"disruptedPods": {"web-0": recent, "web-1": old}}},
        namespace="default",
        subresource="status",
    )
    # web-0 is expected to go within its two minutes: not healthy meanwhile; web-1 is late.
    await eventually(lambda: status(sim).get("disruptedPods") == {"web-0": recent})
    assert counts(sim) == (2, 1, 3, 1)
    await eventually(lambda: ("Pod", "web-1", "NotDeleted") in event_reasons(sim))
    await eventually(lambda: "disruptedPods" not in status(sim), within=120)
    assert counts(sim) == (3, 1, 3, 2)


async def test_a_stale_disruption_target_is_reset(
    sim: RunningApiServer, controller: DisruptionController, clock: Callable[[], datetime]
) -> None:
    def with_target(name: str, reason: str) -> dict[str, Any]:
        pod = running_pod(name)
        pod["status"]["conditions"].append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": reason,
                "message": "default-scheduler: preempting to accommodate a higher priority pod",
                "lastTransitionTime": format_time(clock()),
            }
        )
        return pod

    sim.server.restore("pods", with_target("kept", "PreemptionByScheduler"))
    sim.server.restore("pods", with_target("by-kubelet", "TerminationByKubelet"))

    def target_of(name: str) -> dict[str, Any]:
        pod = sim.server.get("pods", name, namespace="default")
        found = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert isinstance(found, dict)
        return found

    loop = asyncio.get_running_loop()
    started = loop.time()
    await eventually(lambda: target_of("kept")["status"] == "False", within=300)
    assert loop.time() - started >= 119  # two minutes after it was set
    assert "reason" not in target_of("kept")
    assert target_of("by-kubelet")["status"] == "True"
