"""A GPU server with RDMA NICs, as the device plugin registers it, and pods asking for both.

The node: 8 GPUs and 4 NICs on 4 PCIe switches, two switches per NUMA node (one root complex
each).  GPU ``i`` sits on switch ``i // 2``; NIC ``m`` (``mlx5_m``, labelled ``type=fakeW``) on
switch ``m`` with four VFs (functions 1-4 of its PF, one group labelled ``type=general``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo
from hami_protocol.pod.devices import decode_pod_devices_canonical
from hami_protocol.topology.layout import (
    RdmaNic,
    VirtualFunction,
    VirtualFunctionGroup,
    bus_id_from_list_device_id,
    encode_rdma_register,
)

from ..service_helpers import container, pod_object, register_annotations

GPU_MEM = 81920
SWITCHES = ("0000:16:00.0", "0000:26:00.0", "0000:96:00.0", "0000:a6:00.0")
ROOTS = ("pci0000:15", "pci0000:95")
PFS = ("0000:1a:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:aa:00.0")
HINT = {
    "rdma": {
        "selector": {"matchLabels": {"type": "fakeW"}},
        "vfSelector": {"matchLabels": {"type": "general"}},
    }
}
PCIE_LEVEL_BOTH = {
    "rdma": {**HINT["rdma"], "exclusivePolicy": "PCIeLevel"},
    "gpu": {"exclusivePolicy": "PCIeLevel"},
}
"""Exclusive PCIe claims for both device types."""
JOINT = {"deviceTypes": ["gpu", "rdma"]}
SAME_PCIE = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}


def switch_of_gpu(index: int) -> str:
    return SWITCHES[index // 2]


def topo_gpus(node: str, count: int = 8) -> list[DeviceInfo]:
    return [
        DeviceInfo(
            id=f"GPU-{node}-{i}",
            index=i,
            count=10,
            devmem=GPU_MEM,
            devcore=100,
            type="NVIDIA-H100",
            numa=(i // 2) // 2,
            health=True,
            mode="hami-core",
            pci_bus_id=f"0000:{int(switch_of_gpu(i)[5:7], 16) + 2 + i % 2:02x}:00.0",
            pcie_switch=switch_of_gpu(i),
            pcie_root=ROOTS[(i // 2) // 2],
        )
        for i in range(count)
    ]


def vf_id(minor: int, function: int) -> str:
    """VF ``function`` (1..4) of NIC ``minor``: ``0000:1a:00.1`` for (0, 1)."""
    return PFS[minor][:-1] + str(function)


def topo_nics(*, healthy: Sequence[bool] = (True,) * 4, count: int = 4) -> list[RdmaNic]:
    return [
        RdmaNic(
            id=PFS[m],
            name=f"mlx5_{m}",
            minor=m,
            numa=m // 2,
            pcie_switch=SWITCHES[m],
            pcie_root=ROOTS[m // 2],
            healthy=healthy[m],
            labels={"type": "fakeW"},
            vf_groups=(
                VirtualFunctionGroup(
                    vfs=tuple(VirtualFunction(vf_id(m, f), f - 1) for f in range(1, 5)),
                    labels={"type": "general"},
                ),
            ),
        )
        for m in range(count)
    ]


def topo_annotations(
    node: str, *, nics: Sequence[RdmaNic] | None = None, rdma_register: str | None = None
) -> dict[str, str]:
    """The register annotations of the node (``rdma_register`` overrides the encoded NICs)."""
    notes = register_annotations(topo_gpus(node))
    notes[keys.RDMA_REGISTER] = (
        rdma_register
        if rdma_register is not None
        else encode_rdma_register(list(topo_nics() if nics is None else nics))
    )
    return notes


def rdma_pod(
    name: str,
    *,
    gpus: int = 0,
    mem: int | None = None,
    rdma: int | None = 1,
    hint: Mapping[str, Any] | None = HINT,
    joint: Mapping[str, Any] | None = JOINT,
    annotations: Mapping[str, str] | None = None,
    raw_hint: str | None = None,
    raw_joint: str | None = None,
) -> dict[str, Any]:
    """A pod with one container asking ``gpus`` GPUs (``mem`` MiB each) and ``rdma`` units."""
    notes = dict(annotations or {})
    if raw_hint is not None or hint is not None:
        notes[keys.KOORD_DEVICE_ALLOCATE_HINT] = raw_hint or json.dumps(hint)
    if raw_joint is not None or joint is not None:
        notes[keys.KOORD_DEVICE_JOINT_ALLOCATE] = raw_joint or json.dumps(joint)
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if rdma is not None:
        limits["koordinator.sh/rdma"] = str(rdma)
    return pod_object(name, container(limits=limits), annotations=notes)


def gpu_indices(allocated: str) -> list[int]:
    """Indices of the GPUs in a ``hami.io/vgpu-devices-allocated`` value."""
    return sorted(
        {
            int(device.uuid.rsplit("-", 1)[1])
            for ctr in decode_pod_devices_canonical(allocated)
            for device in ctr
        }
    )


def rdma_entries(allocated: str) -> list[list[tuple[str, int]]]:
    """``(bus id, units)`` per container of a ``hami.io/rdma-devices-allocated`` value."""
    return [
        [(bus_id_from_list_device_id(d.uuid), d.usedmem) for d in ctr]
        for ctr in decode_pod_devices_canonical(allocated)
    ]
