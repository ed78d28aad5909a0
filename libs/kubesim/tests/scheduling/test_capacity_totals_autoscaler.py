"""What the cluster-autoscaler sees of GPU memory, with and without the capacity totals.

The autoscaler simulates scheduling with kube-scheduler's in-tree PreFilter/Filter plugins and
no extenders (contract §4.1): here that is :func:`filter_node`.  Extender ``ignoredByScheduler``
does not reach it: unless its ``--scheduler-config-file`` lists HAMi's per-card names
(``nvidia.com/gpumem``, ...) in ``NodeResourcesFit`` ``ignoredResources``, every HAMi pod is
``Insufficient nvidia.com/gpumem`` on every node (autoscaler #5278); with them listed it runs
as below.  Node: 8 ×
80 GiB GPUs (81920 MiB each, split 10: ``nvidia.com/gpu`` 80), every card holding a pod of
80000 MiB.  A pending pod asks one GPU with 40000 MiB.

* Without the totals (HAMi #1099) the full node looks feasible (only 8 of 80 slots are used), so
  the autoscaler drops the pod as "can be scheduled" and never scales up.
* With them the node is full (``Insufficient hami.io/nvidia-memory``), and a node-group
  template carrying the totals (an AWS ASG tagged as docs/capacity.md shows, or a warm group's
  copy of a node) fits; a template without them does not (autoscaler #5278).
"""

from __future__ import annotations

from typing import Any

from hami_kube.objects import NodeView, PodView
from hami_kubesim.scheduler.predicates import RequestedOnNode, filter_node, pod_requests
from hami_protocol.config.device import NvidiaConfig
from hami_protocol.node.registry import DeviceInfo
from hami_protocol.totals import NVIDIA_MEMORY, Totals, container_totals, node_totals
from hami_protocol.vendor.table import nvidia_vendor

NVIDIA = nvidia_vendor(NvidiaConfig())
CARD_MIB = 81920
GPUS = 8
SPLIT = 10
ASG_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/"

CARDS = [
    DeviceInfo(f"GPU-{i}", i, SPLIT, CARD_MIB, 100, "NVIDIA-H100", 0, health=True)
    for i in range(GPUS)
]
NODE_TOTALS = node_totals(CARDS)
BASE = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(GPUS * SPLIT)}


def node(name: str, capacity: dict[str, str]) -> NodeView:
    return NodeView({"metadata": {"name": name}, "status": {"allocatable": dict(capacity)}})


def gpu_pod(name: str, memory: int, *, totals: bool) -> PodView:
    """A pod asking one GPU with ``memory`` MiB, as the webhook leaves it (totals in limits and
    requests when the mode is on)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory), "nvidia.com/gpucores": "0"}
    container: dict[str, Any] = {"name": "c", "resources": {"limits": limits}}
    if totals:
        written = container_totals(container, NVIDIA).resources()
        container["resources"] = {"limits": {**limits, **written}, "requests": dict(written)}
    return PodView({"metadata": {"name": name}, "spec": {"containers": [container]}})


def used(pods: list[PodView]) -> RequestedOnNode:
    usage = RequestedOnNode()
    for pod in pods:
        usage = usage.plus(pod_requests(pod))
    return usage


CA_IGNORED = frozenset(
    {
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "nvidia.com/priority",
    }
)
"""What the autoscaler's scheduler config ignores: the names kube-scheduler ignores in the mode."""


def autoscaler_sees(
    pod: PodView, candidate: NodeView, pods: list[PodView], ignored: frozenset[str] = CA_IGNORED
) -> tuple[str, ...]:
    """The autoscaler's Filter pass: in-tree only, no extender."""
    status = filter_node(pod, pod_requests(pod), candidate, used(pods), ignored_resources=ignored)
    return () if status is None else status.reasons


def template_from_asg_tags(name: str, tags: dict[str, str]) -> NodeView:
    """A cold (size 0) ASG's template node: resources from its node-template tags."""
    resources = {k.removeprefix(ASG_RESOURCE_TAG): v for k, v in tags.items()}
    return node(name, resources)


def test_node_totals_of_eight_80_gib_cards() -> None:
    assert Totals(655360, 800) == NODE_TOTALS
    assert NODE_TOTALS.resources() == {NVIDIA_MEMORY: "655360", "hami.io/nvidia-cores": "800"}


def test_without_totals_a_full_node_looks_feasible() -> None:
    running = [gpu_pod(f"p{i}", 80000, totals=False) for i in range(GPUS)]
    pending = gpu_pod("pending", 40000, totals=False)
    full = node("gpu-1", BASE)
    assert autoscaler_sees(pending, full, running) == ()
    # Not even ignoring HAMi's names: nothing fits anywhere, templates included.
    refused = autoscaler_sees(pending, full, running, ignored=frozenset())
    assert refused == ("Insufficient nvidia.com/gpumem",)


def test_with_totals_the_full_node_is_full_and_a_tagged_template_fits() -> None:
    running = [gpu_pod(f"p{i}", 80000, totals=True) for i in range(GPUS)]
    pending = gpu_pod("pending", 40000, totals=True)
    full = node("gpu-1", {**BASE, **NODE_TOTALS.resources()})
    assert autoscaler_sees(pending, full, running) == ("Insufficient hami.io/nvidia-memory",)
    # Cold group: the ASG carries the totals as node-template tags.
    tags = {f"{ASG_RESOURCE_TAG}{k}": v for k, v in {**BASE, **NODE_TOTALS.resources()}.items()}
    assert autoscaler_sees(pending, template_from_asg_tags("template", tags), []) == ()
    # Warm group: the template is a sanitized copy of an existing node's status.
    assert (
        autoscaler_sees(pending, node("copy-of-gpu-1", {**BASE, **NODE_TOTALS.resources()}), [])
        == ()
    )
    # A template without the totals cannot hold a pod that asks them.
    untagged = template_from_asg_tags(
        "bare", {f"{ASG_RESOURCE_TAG}{k}": v for k, v in BASE.items()}
    )
    reasons = autoscaler_sees(pending, untagged, [])
    assert reasons == ("Insufficient hami.io/nvidia-memory",)  # its cores total is 0: not asked


def test_a_percentage_pod_is_seen_by_cores_only() -> None:
    """Percentage requests name no MiB at admission: only their cores count (a documented
    limit), so a node full of memory but not of cores still looks feasible for them."""
    limits = {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem-percentage": "50",
        "nvidia.com/gpucores": "30",
    }
    container: dict[str, Any] = {"name": "c", "resources": {"limits": limits}}
    assert container_totals(container, NVIDIA) == Totals(0, 30)
