"""The capacity totals never count more than the extender places (hami_protocol.totals).

For any node and any pods the scheduler core accepts on it one after another: each pod's totals
(what the webhook writes and kube-scheduler / the kubelet count) are at most what the extender
charges for it, and their sum stays within the node's totals (what the device plugin
advertises).  So in the capacity totals mode in-tree NodeResourcesFit and kubelet admission
(``OutOf<name>``) never refuse a placement the extender made.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from hami_protocol.config.device import NvidiaConfig
from hami_protocol.node.registry import DeviceInfo
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import pod_device_requests
from hami_protocol.totals import ZERO, Totals, node_totals, pod_totals
from hami_protocol.vendor.table import DEFAULT_VENDORS, nvidia_vendor
from hami_scheduler.core import apply_usage, build_node_usage, decide_node, decision_usage, pod_plan

from ..core_helpers import gpu

NVIDIA = nvidia_vendor(NvidiaConfig())


def _devices(specs: list[tuple[int, int, int, bool]]) -> list[DeviceInfo]:
    return [
        DeviceInfo(
            id=f"GPU-{i}",
            index=i,
            count=count,
            devmem=mem,
            devcore=core,
            type="NVIDIA-A100",
            numa=0,
            health=health,
        )
        for i, (mem, core, count, health) in enumerate(specs)
    ]


devices_st = st.lists(
    st.tuples(
        st.sampled_from([8000, 16384, 24576, 81920]),
        st.sampled_from([50, 100, 200]),
        st.integers(1, 6),
        st.sampled_from([True, True, True, False]),
    ),
    min_size=1,
    max_size=4,
).map(_devices)


def _container(nums: int, mem: int | None, pct: int | None, cores: int | None) -> dict[str, Any]:
    return {"name": "c", **gpu(nums, mem=mem, cores=cores, pct=pct)}


container_st = st.builds(
    _container,
    st.integers(1, 2),
    st.none() | st.integers(1, 12000),
    st.none() | st.integers(1, 100),
    st.none() | st.integers(0, 40) | st.just(150),
)
pod_st = st.builds(
    lambda apps, inits: {
        "spec": {
            "containers": [{**c, "name": f"a{i}"} for i, c in enumerate(apps)],
            "initContainers": [{**c, "name": f"i{i}"} for i, c in enumerate(inits)],
        }
    },
    st.lists(container_st, min_size=1, max_size=2),
    st.lists(container_st, max_size=1),
)


@settings(max_examples=200, deadline=None)
@given(devices=devices_st, pods=st.lists(pod_st, min_size=1, max_size=8))
def test_accepted_pods_never_exceed_the_node_totals(
    devices: list[DeviceInfo], pods: list[dict[str, Any]]
) -> None:
    node = build_node_usage("n", {"NVIDIA": devices})
    advertised = node_totals(devices)
    placed = ZERO
    accepted = 0
    for pod in pods:
        plan = pod_plan(pod_device_requests(pod, vendors=DEFAULT_VENDORS), parse_pod_policy({}))
        decision = decide_node(node, plan)
        if not decision.fits:
            continue
        usage = decision_usage(decision, plan)
        charged = Totals(sum(u.usedmem for u in usage), sum(u.usedcores for u in usage))
        totals = pod_totals(pod, NVIDIA)
        assert totals.fits_in(charged), (totals, charged)
        placed += totals
        accepted += 1
        node = apply_usage(node, usage)
    assert placed.fits_in(advertised), (placed, advertised)
    event(f"pods placed: {min(accepted, 3)}+")
