"""The demo's cluster: its GPU nodes, the nodes of other vendors, the tainted nodes of the
preemption and DRA examples, and the system spec it runs (capacity totals on kube-scheduler's
<= 1.37 preemption).  :mod:`.cli` describes each node; ``tests/deploy`` checks that compose
runs the same GPU nodes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hami_kubesim.stack.system.spec import (
    SystemSpec,
    dra_node,
    gpu_model_node,
    mig_node,
    nvlinked_pairs,
    vendor_node,
)
from hami_kubesim.vendors.inventory import VendorDevices
from hami_protocol import keys

PREEMPTION_NODE = "gpu-node-p"
"""The preemption example's node: tainted so only its two pods land there (the other examples'
placements stay as they were); the demo's own, compose does not run it."""
DRA_NODE = "gpu-node-dra"
"""The DRA examples' node: tainted so only they land there."""
_NODE_C = gpu_model_node("gpu-node-c", "NVIDIA A10", count=8, memory_mib=23028, numa_nodes=2)
DEMO_NODES = (
    gpu_model_node("gpu-node-a", "Tesla T4", count=4, memory_mib=15360, numa_nodes=2),
    gpu_model_node("gpu-node-b", "NVIDIA A100-SXM4-80GB", count=2, memory_mib=81920, numa_nodes=2),
    dataclasses.replace(_NODE_C, links=nvlinked_pairs(_NODE_C, nvlinks=4), topology_score=True),
    dataclasses.replace(
        mig_node("gpu-node-mig", "NVIDIA A100-SXM4-40GB"),
        taints=({"key": "nvidia.com/mig", "value": "true", "effect": "NoSchedule"},),
    ),
    vendor_node("npu-node-a", VendorDevices(vendor="Ascend910B3", devices=8, memory_mib=65536)),
    vendor_node(
        "npu-node-b",
        VendorDevices(
            vendor="Ascend910B4", devices=4, annotations={keys.ASCEND_NODE_VNPU_CORE: "true"}
        ),
    ),
    vendor_node("dcu-node-a", VendorDevices(vendor="DCU", devices=4, memory_mib=32768, split=4)),
    vendor_node("mlu-node-a", VendorDevices(vendor="MLU", devices=4, memory_mib=24576)),
    vendor_node("metax-node-a", VendorDevices(vendor="Metax-GPU", devices=2)),
    vendor_node("xpu-node-a", VendorDevices(vendor="XPU", devices=4)),
    vendor_node("kunlun-node-a", VendorDevices(vendor="kunlun", devices=8)),
    vendor_node("neuron-node-a", VendorDevices(vendor="AWSNeuron", devices=8)),
    vendor_node("sgpu-node-a", VendorDevices(vendor="Metax-SGPU", devices=2)),
    dataclasses.replace(
        gpu_model_node(
            PREEMPTION_NODE,
            "NVIDIA L4",
            count=1,
            memory_mib=23034,
            labels={"demo.hami.io/pool": "preemption"},
        ),
        taints=({"key": "demo.hami.io/preemption", "value": "true", "effect": "NoSchedule"},),
    ),
    dra_node(
        DRA_NODE,
        labels={"demo.hami.io/pool": "dra"},
        taints=({"key": "demo.hami.io/dra", "value": "true", "effect": "NoSchedule"},),
    ),
)
PREEMPTION_MODE = (
    "kube-scheduler <= 1.37 preemption with the capacity totals mode (global.capacityTotals): "
    "in-tree filters count GPU memory, the extender's preempt verb refines the victims per GPU"
)


def demo_spec(work_dir: Path | None = None) -> SystemSpec:
    # Capacity totals on kube-scheduler's <= 1.37 preemption: the preemption example works as
    # it would on today's clusters (without the totals, <= 1.37 never preempts for GPU memory).
    return SystemSpec(
        nodes=DEMO_NODES,
        work_dir=work_dir,
        vgpu_monitor=True,
        capacity_totals=True,
        preemption_behaviour="1.37",
    )
