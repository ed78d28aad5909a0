"""Extended resources advertised by someone else (``PATCH nodes/<n>/status``): allocatable follows
capacity as at each kubelet status sync, and kubelet admission refuses a pod that does not fit
(``OutOf<name>``) while ignoring what the node does not advertise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hami_kube.objects import NodeView, PodView
from hami_kubesim.kubelet.pods.predicate import (
    InsufficientResource,
    allocatable_follows_capacity,
    insufficient_extended,
)
from hami_kubesim.kubelet.testing import TEST_NODE, kubelet_on_node, pod_phase
from hami_kubesim.testing import RunningApiServer, eventually

MEM = "hami.io/nvidia-memory"
CORES = "hami.io/nvidia-cores"


def node(capacity: dict[str, str], allocatable: dict[str, str] | None = None) -> NodeView:
    status = {"capacity": capacity, "allocatable": capacity if allocatable is None else allocatable}
    return NodeView({"metadata": {"name": "n"}, "status": status})


def pod(name: str, *containers: dict[str, str], init: tuple[dict[str, str], ...] = ()) -> Any:
    def ctr(index: int, limits: dict[str, str]) -> dict[str, Any]:
        return {"name": f"c{index}", "image": "x", "resources": {"limits": limits}}

    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "containers": [ctr(i, c) for i, c in enumerate(containers)],
            "initContainers": [ctr(100 + i, c) for i, c in enumerate(init)],
        },
    }


def test_allocatable_copies_extended_capacity_and_drops_what_capacity_lost() -> None:
    capacity = {"cpu": "8", MEM: "1000", "nvidia.com/gpu": "40"}
    allocatable = {"cpu": "7", "nvidia.com/gpu": "30", "example.com/gone": "5"}
    changes = allocatable_follows_capacity(capacity, allocatable, managed={"nvidia.com/gpu"})
    # cpu is native (the kubelet subtracts reservations), nvidia.com/gpu the device plugin's.
    assert changes == {MEM: "1000", "example.com/gone": None}
    synced = {k: v for k, v in {**allocatable, **changes}.items() if v is not None}
    assert allocatable_follows_capacity(capacity, synced, managed={"nvidia.com/gpu"}) == {}
    # Without a device plugin for it, nvidia.com/gpu would follow capacity too.
    assert allocatable_follows_capacity(capacity, synced, managed=()) == {"nvidia.com/gpu": "40"}


def test_admission_counts_advertised_extended_resources_only() -> None:
    advertised = node({MEM: "1000", CORES: "200"})
    running = [PodView(pod("a", {MEM: "600", CORES: "50"}))]
    fits = PodView(pod("b", {MEM: "400", CORES: "150", "example.com/other": "9"}))
    assert insufficient_extended(fits, advertised, running, managed=()) is None
    too_big = PodView(pod("c", {MEM: "300"}, init=({MEM: "401"},)))
    shortfall = insufficient_extended(too_big, advertised, running, managed=())
    assert shortfall == InsufficientResource(MEM, 401, 600, 1000)
    assert shortfall.reason == "OutOfhami.io/nvidia-memory"
    assert shortfall.message == (
        "Node didn't have enough resource: hami.io/nvidia-memory, requested: 401, used: 600, "
        "capacity: 1000"
    )
    # Not advertised (removeMissingExtendedResources) or the device plugin's: not checked here.
    assert insufficient_extended(too_big, node({}), running, managed=()) is None
    assert insufficient_extended(too_big, advertised, running, managed={MEM}) is None


def _allocatable(sim: RunningApiServer) -> dict[str, Any]:
    return dict(NodeView(sim.server.get("nodes", TEST_NODE)).allocatable)


async def _advertise(sim: RunningApiServer, capacity: dict[str, str | None]) -> None:
    await sim.server.patch(
        "nodes",
        TEST_NODE,
        {"status": {"capacity": capacity}},
        patch_type="merge",
        subresource="status",
    )


def _status(sim: RunningApiServer, name: str) -> dict[str, Any]:
    found: dict[str, Any] = sim.server.get("pods", name, namespace="default").get("status") or {}
    return found


async def _admitted(sim: RunningApiServer, name: str, limits: dict[str, str]) -> None:
    """Create a pod bound to the node and wait until the kubelet admitted or refused it."""
    body = pod(name, limits)
    del body["metadata"]["uid"]
    body["spec"]["nodeName"] = TEST_NODE
    await sim.server.create("pods", body)
    await eventually(lambda: pod_phase(sim, name) in ("Running", "Failed"), what=f"{name} settled")


async def test_the_stand_in_follows_patched_capacity_and_refuses_what_does_not_fit(
    tmp_path: Path,
) -> None:
    async with kubelet_on_node(tmp_path / "plugins") as (sim, _):
        await _advertise(sim, {MEM: "1000"})
        await eventually(lambda: _allocatable(sim).get(MEM) == "1000", what="allocatable follows")
        await _admitted(sim, "first", {MEM: "600"})
        await _admitted(sim, "second", {MEM: "600"})
        assert pod_phase(sim, "first") == "Running"
        assert pod_phase(sim, "second") == "Failed"
        status = _status(sim, "second")
        assert status["reason"] == "OutOfhami.io/nvidia-memory"
        assert status["message"] == (
            "Pod was rejected: Node didn't have enough resource: hami.io/nvidia-memory, "
            "requested: 600, used: 600, capacity: 1000"
        )
        events = [e for e in sim.server.list("events") if e.get("reason") == status["reason"]]
        assert events
        assert events[0]["message"] == status["message"].removeprefix("Pod was rejected: ")
        # Taken out of capacity: allocatable loses it, and a pod naming it is admitted again.
        await _advertise(sim, {MEM: None})
        await eventually(lambda: MEM not in _allocatable(sim), what="allocatable drops it")
        body = pod("third", {MEM: "5000"})
        body["metadata"].pop("uid")
        await sim.server.create("pods", {**body, "spec": {**body["spec"], "nodeName": TEST_NODE}})
        await eventually(lambda: pod_phase(sim, "third") == "Running", what="third admitted")
