"""Builders for the core tests: devices, nodes, requests and plans in a line each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from hypothesis import strategies as st

from hami_protocol.node.registry import DevicePairScore
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import (
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    PodDeviceRequests,
    pod_device_requests,
)
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.core import (
    DeviceUsage,
    NodeUsage,
    PodPlan,
    VendorQuota,
    node_layout,
    pod_plan,
)
from hami_scheduler.core.usage.device import NO_CUSTOM

T4 = "NVIDIA-Tesla T4"


def dev(
    uuid: str,
    *,
    mem: int = 8000,
    cores: int = 100,
    count: int = 10,
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    numa: int = 0,
    health: bool = True,
    model: str = T4,
    mode: str = "hami-core",
    index: int = 0,
    vendor: str = "NVIDIA",
    custom: Mapping[str, str] | None = None,
) -> DeviceUsage:
    return DeviceUsage(
        uuid=uuid,
        vendor=vendor,
        type=model,
        index=index,
        numa=numa,
        mode=mode,
        health=health,
        count=count,
        totalmem=mem,
        totalcore=cores,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        custom=NO_CUSTOM if custom is None else MappingProxyType(dict(custom)),
    )


def node(
    name: str,
    devices: Sequence[DeviceUsage],
    *,
    cordon: Iterable[str] = (),
    pair_scores: Mapping[str, Mapping[str, int]] | None = None,
) -> NodeUsage:
    """A node holding ``devices`` (grouped by vendor, first-seen order) with their usage."""
    groups: dict[str, list[DeviceUsage]] = {}
    for device in devices:
        groups.setdefault(device.vendor, []).append(device)
    scores = [
        DevicePairScore(uuid=uuid, scores=tuple(peers.items()))
        for uuid, peers in (pair_scores or {}).items()
    ]
    layout = node_layout(
        name,
        [(word, [d.uuid for d in group]) for word, group in groups.items()],
        cordon=cordon,
        pair_scores=scores,
    )
    ordered = tuple(d for group in groups.values() for d in group)
    return NodeUsage(layout, ordered)


def req(
    nums: int = 1,
    *,
    mem: int = 0,
    pct: int = PERCENTAGE_UNSET,
    cores: int = 0,
    type: str = "NVIDIA",
) -> ContainerDeviceRequest:
    if mem == 0 and pct == PERCENTAGE_UNSET:
        pct = 100
    return ContainerDeviceRequest(
        nums=nums, type=type, memreq=mem, mem_percentagereq=pct, coresreq=cores
    )


def gpu(
    nums: int = 1, *, mem: int | None = None, cores: int | None = None, pct: int | None = None
) -> dict[str, Any]:
    """A container asking for NVIDIA GPUs (resource limits as a user writes them)."""
    limits: dict[str, Any] = {"nvidia.com/gpu": str(nums)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    if pct is not None:
        limits["nvidia.com/gpumem-percentage"] = str(pct)
    return {"resources": {"limits": limits}}


def plain() -> dict[str, Any]:
    """A container without devices."""
    return {"resources": {}}


def requests_of(
    containers: Sequence[Mapping[str, Any]], init: Sequence[Mapping[str, Any]] = ()
) -> PodDeviceRequests:
    spec = {
        "initContainers": [{"name": f"init{i}", **c} for i, c in enumerate(init)],
        "containers": [{"name": f"c{i}", **c} for i, c in enumerate(containers)],
    }
    return pod_device_requests({"spec": spec}, vendors=DEFAULT_VENDORS)


def plan_of(
    containers: Sequence[Mapping[str, Any]],
    *,
    init: Sequence[Mapping[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
    quota: Mapping[str, VendorQuota] | None = None,
) -> PodPlan:
    policy = parse_pod_policy(annotations or {})
    return pod_plan(requests_of(containers, init), policy, quota=quota)


def uuids(devices: Iterable[Any]) -> list[str]:
    return [d.uuid for d in devices]


# --- hypothesis strategies ---------------------------------------------------------------------

GPU_POLICIES = (
    "binpack",
    "spread",
    "mutex",
    "topology-aware",
    "numa",
    "binpack,numa",
    "numa,spread",
    "mutex,binpack",
)


@st.composite
def devices_st(
    draw: st.DrawFn,
    *,
    with_usage: bool,
    roomy: bool = False,
    vendor: str = "NVIDIA",
    prefix: str = "g",
) -> list[DeviceUsage]:
    """1-5 devices of one vendor.

    ``with_usage``: they carry existing usage, at times beyond capacity (as a cache may see after
    a registration shrinks).  ``roomy``: mostly large, healthy, lightly used devices, so that
    pods often fit.
    """
    size = draw(st.integers(3 if roomy else 1, 5))
    devices = []
    for i in range(size):
        if roomy:
            count = draw(st.sampled_from([1, 2, 4, 10]))
            mem = draw(st.sampled_from([4000, 8000, 16000]))
            cores = draw(st.sampled_from([100, 100, 200]))
            health = draw(st.sampled_from([True] * 9 + [False]))
            mode = draw(st.sampled_from(["hami-core"] * 9 + ["mig"]))
        else:
            count = draw(st.sampled_from([0, 1, 2, 4, 4, 10]))
            mem = draw(st.sampled_from([0, 1000, 2000, 8000, 8000, 16000]))
            cores = draw(st.sampled_from([0, 4, 100, 100, 100, 200]))
            health = draw(st.sampled_from([True, True, True, False]))
            mode = draw(st.sampled_from(["hami-core", "hami-core", "hami-core", "mig"]))
        used = usedmem = usedcores = 0
        if with_usage and roomy:
            used = draw(st.sampled_from([0, 0, 0, 1, count]))
            usedmem = draw(st.sampled_from([0, 0, mem // 4, mem // 2]))
            usedcores = draw(st.sampled_from([0, 0, cores // 4, cores // 2, cores]))
        elif with_usage:
            used = draw(st.sampled_from([0, 0, 1, count, count + 1]))
            usedmem = draw(st.sampled_from([0, 0, mem // 4, mem // 2, mem, mem + 1]))
            usedcores = draw(st.sampled_from([0, 0, cores // 4, cores // 2, cores, cores + 1]))
        devices.append(
            dev(
                f"{prefix}{i}",
                vendor=vendor,
                model="MLU-370" if vendor == "MLU" else T4,
                count=count,
                mem=mem,
                cores=cores,
                used=used,
                usedmem=usedmem,
                usedcores=usedcores,
                numa=draw(st.integers(0, 1)),
                index=i,
                health=health,
                mode=mode,
            )
        )
    return devices


@st.composite
def node_st(
    draw: st.DrawFn, name: str = "n", *, with_usage: bool = False, roomy: bool = False
) -> NodeUsage:
    devices = draw(devices_st(with_usage=with_usage, roomy=roomy))
    if draw(st.booleans()):
        devices += draw(devices_st(with_usage=with_usage, roomy=roomy, vendor="MLU", prefix="m"))
    uuids_ = [d.uuid for d in devices]
    cordon = draw(st.lists(st.sampled_from(uuids_), max_size=1))
    pairs: dict[str, dict[str, int]] = {}
    if draw(st.booleans()):
        for a in uuids_:
            pairs[a] = {b: draw(st.integers(-5, 300)) for b in uuids_ if b != a}
    return node(name, devices, cordon=cordon, pair_scores=pairs)


@st.composite
def container_st(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["plain", "plain", "gpu", "gpu", "gpu", "gpu", "gpu", "mlu"]))
    if kind == "plain":
        return plain()
    if kind == "mlu":
        limits = {
            "cambricon.com/vmlu": "1",
            "cambricon.com/mlu.smlu.vcore": str(draw(st.sampled_from([10, 50, 100]))),
        }
        return {"resources": {"limits": limits}}
    return gpu(
        draw(st.sampled_from([1, 1, 1, 2, 3])),
        mem=draw(st.sampled_from([None, 500, 1000, 1000, 2000, 3000, 8000])),
        cores=draw(st.sampled_from([None, 0, 10, 10, 30, 50, 100, 120])),
        pct=draw(st.sampled_from([None] * 6 + [25, 50, 100])),
    )


@st.composite
def plan_st(
    draw: st.DrawFn, *, quota: Mapping[str, VendorQuota] | None = None, simple: bool = False
) -> PodPlan:
    """A random pod under ``quota``; ``simple`` leaves the quota out."""
    app = draw(st.lists(container_st(), min_size=1, max_size=3))
    init = draw(st.lists(container_st(), max_size=2)) if draw(st.booleans()) else []
    annotations = {
        "hami.io/gpu-scheduler-policy": draw(st.sampled_from(GPU_POLICIES)),
        "hami.io/node-scheduler-policy": draw(st.sampled_from(["binpack", "spread"])),
    }
    if draw(st.booleans()):
        annotations["nvidia.com/numa-bind"] = "true"
    if draw(st.integers(0, 5)) == 0:
        annotations["nvidia.com/nouse-gpuuuid"] = "g0"
    if draw(st.integers(0, 5)) == 0:
        annotations["nvidia.com/vgpu-mode"] = "hami-core"
    return plan_of(app, init=init, annotations=annotations, quota=None if simple else quota)
