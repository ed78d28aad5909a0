"""Builders for the joint GPU + RDMA tests: Koordinator's fixture F, pods and holdings.

Fixture F (contracts/koordinator.md §5, adapted): one node, two NUMA nodes, four PCIe switches
p0..p3 (p0, p1 on NUMA 0; p2, p3 on NUMA 1), GPUs 0,1@p0 2,3@p1 4,5@p2 6,7@p3 (80 GiB each),
RDMA NICs minor 1@p0 ``0000:1f:00.0``, 2@p1 ``0000:90:00.0``, 3@p2 ``0000:51:00.0``,
4@p3 ``0000:b9:00.0``, each labelled ``type=fakeW`` with one VF group ``type=general`` of four VFs
(functions 2-5 of the PF's device, e.g. ``0000:1f:00.2`` … ``0000:1f:00.5``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hami_protocol.pod.devices import DeviceUsageSummary
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import pod_device_requests
from hami_protocol.topology.layout import (
    GPUTopology,
    RdmaNic,
    VirtualFunction,
    VirtualFunctionGroup,
)
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.core import NodeUsage, PodPlan, apply_usage, pod_plan
from hami_scheduler.core.joint.decide import JointDecision, decide_joint
from hami_scheduler.core.joint.hints import JointRequest, joint_request_of_pod
from hami_scheduler.core.joint.nics import (
    NicHold,
    NicLayout,
    NicPodUsage,
    NicUsage,
    build_nic_usage,
    nic_layout,
)

from .core_helpers import dev, node

GPU_MEM = 81920
SWITCHES = ("0000:17:00.0", "0000:3a:00.0", "0000:5d:00.0", "0000:ae:00.0")
"""p0..p3."""
NIC_IDS = {1: "0000:1f:00.0", 2: "0000:90:00.0", 3: "0000:51:00.0", 4: "0000:b9:00.0"}
"""Minor → PF bus id, as in Koordinator's fixture."""
GENERAL = {"type": "general"}
FAKEW = {"type": "fakeW"}


def gpu_id(i: int) -> str:
    return f"GPU-{i}"


def vf_id(minor: int, function: int) -> str:
    """VF ``function`` (2..5) of NIC ``minor``: ``0000:1f:00.2`` for (1, 2)."""
    return NIC_IDS[minor][:-1] + str(function)


def vfs_of(pf: str, count: int = 4, start: int = 2) -> tuple[VirtualFunction, ...]:
    base = pf[:-1]
    return tuple(VirtualFunction(bus_id=f"{base}{start + i}", minor=i) for i in range(count))


def make_nic(
    minor: int,
    pf: str,
    switch: str,
    numa: int,
    *,
    vfs: int = 4,
    labels: Mapping[str, str] = FAKEW,
    vf_labels: Mapping[str, str] = GENERAL,
    healthy: bool = True,
) -> RdmaNic:
    groups = (VirtualFunctionGroup(vfs=vfs_of(pf, vfs), labels=vf_labels),) if vfs else ()
    return RdmaNic(
        id=pf,
        name=f"mlx5_{minor}",
        minor=minor,
        numa=numa,
        pcie_switch=switch,
        healthy=healthy,
        labels=labels,
        vf_groups=groups,
    )


def f_nics(*, vfs: int = 4) -> list[RdmaNic]:
    return [
        make_nic(m, NIC_IDS[m], SWITCHES[m - 1], 0 if m <= 2 else 1, vfs=vfs) for m in (1, 2, 3, 4)
    ]


def f_places(gpus: int = 8, per_switch: int = 2) -> list[GPUTopology]:
    return [
        GPUTopology(
            uuid=gpu_id(i),
            pcie_switch=SWITCHES[i // per_switch],
            numa=0 if i // per_switch < 2 else 1,
        )
        for i in range(gpus)
    ]


def f_node(
    held: Mapping[int, int] | None = None,
    *,
    gpus: int = 8,
    per_switch: int = 2,
    numa_of: Mapping[int, int] | None = None,
) -> NodeUsage:
    """Fixture F's GPUs; ``held`` maps GPU index → MiB another pod holds on it."""
    devices = []
    for i in range(gpus):
        numa = (numa_of or {}).get(i, 0 if i // per_switch < 2 else 1)
        devices.append(dev(gpu_id(i), mem=GPU_MEM, cores=100, count=10, numa=numa, index=i))
    base = node("n1", devices)
    summaries = [
        DeviceUsageSummary(gpu_id(i), "NVIDIA", mem, 0, 1) for i, mem in (held or {}).items()
    ]
    return apply_usage(base, summaries)


def f_layout(
    nics: Sequence[RdmaNic] | None = None, places: Iterable[GPUTopology] | None = None
) -> NicLayout:
    return nic_layout(
        "n1", f_nics() if nics is None else nics, gpus=f_places() if places is None else places
    )


def hold(minor: int, units: int = 1, *vfs: str) -> NicHold:
    return NicHold(NIC_IDS[minor], units, tuple(vfs))


def f_usage(
    *holds: NicHold, layout: NicLayout | None = None, claims: Sequence[tuple[str, str]] = ()
) -> NicUsage:
    pods = [NicPodUsage(holds=(h,)) for h in holds]
    if claims:
        pods.append(NicPodUsage(claims=tuple(claims)))
    return build_nic_usage(layout or f_layout(), pods)


DEFAULT_HINT: dict[str, Any] = {
    "rdma": {
        "selector": {"matchLabels": {"type": "fakeW"}},
        "vfSelector": {
            "matchExpressions": [{"key": "type", "operator": "In", "values": ["general", "fakeG"]}]
        },
    }
}
DEFAULT_JOINT: dict[str, Any] = {"deviceTypes": ["gpu", "rdma"]}


def pod_json(
    gpus: int = 1,
    rdma: int | str | None = 1,
    *,
    hint: Mapping[str, Any] | None = DEFAULT_HINT,
    joint: Mapping[str, Any] | None = DEFAULT_JOINT,
    annotations: Mapping[str, str] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A pod with one container asking ``gpus`` whole GPUs and ``rdma`` units, or ``containers``."""
    notes = dict(annotations or {})
    if hint is not None:
        notes["scheduling.koordinator.sh/device-allocate-hint"] = json.dumps(hint)
    if joint is not None:
        notes["scheduling.koordinator.sh/device-joint-allocate"] = json.dumps(joint)
    if containers is None:
        limits: dict[str, Any] = {}
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        if rdma is not None:
            limits["koordinator.sh/rdma"] = str(rdma)
        containers = [{"name": "main", "resources": {"limits": limits}}]
    return {
        "metadata": {"name": "p", "namespace": "default", "annotations": notes},
        "spec": {"initContainers": list(init), "containers": list(containers)},
    }


def container(name: str, **limits: str) -> dict[str, Any]:
    """A container; keyword ``gpu``, ``gpumem``, ``gpucores``, ``rdma`` map to the resources."""
    names = {
        "gpu": "nvidia.com/gpu",
        "gpumem": "nvidia.com/gpumem",
        "gpucores": "nvidia.com/gpucores",
        "rdma": "koordinator.sh/rdma",
    }
    return {"name": name, "resources": {"limits": {names[k]: v for k, v in limits.items()}}}


def plan_and_request(pod: Mapping[str, Any]) -> tuple[PodPlan, JointRequest]:
    notes = pod["metadata"]["annotations"]
    plan = pod_plan(pod_device_requests(pod, vendors=DEFAULT_VENDORS), parse_pod_policy(notes))
    return plan, joint_request_of_pod(pod, plan)


def decide(pod: Mapping[str, Any], gpus: NodeUsage, nics: NicUsage) -> JointDecision:
    plan, request = plan_and_request(pod)
    return decide_joint(gpus, nics, plan, request)


def chosen_gpus(decision: JointDecision) -> list[int]:
    """Indices of the GPUs the decision gives, sorted."""
    found = {
        int(d.uuid.split("-")[1]) for _, pod in decision.devices.entries for c in pod for d in c
    }
    return sorted(found)


def chosen_nics(decision: JointDecision) -> list[int]:
    return sorted({g.minor for grants in decision.nics for g in grants})


def chosen_vfs(decision: JointDecision) -> list[str]:
    return sorted(g.vf.bus_id for grants in decision.nics for g in grants if g.vf is not None)
