"""Pure: the node's ResourceSlice for driver ``gpu.hami.io`` from the plugin's own GPU list.

One slice per node, pool = node name, ``resourceSliceCount`` 1, ``spec.nodeName`` set and the
Node as owner (so the slice goes with the node).  One device per healthy GPU, ``gpu-<index>``
(an unhealthy GPU is left out, so the scheduler stops placing claims on it; a claim already
prepared keeps its CDI spec), with attributes ``uuid``, ``model`` (HAMi's type name,
``NVIDIA-<model>``, which ``nvidia.com/use-gputype`` matches), ``index``, ``numa`` and, when
known, ``resource.kubernetes.io/pcieRoot``; capacities ``memory`` (bytes after
``deviceMemoryScaling``, as the register annotation counts it) and ``cores`` (100 × core
scaling).

Shared GPUs (split count > 1, HAMi's "tasks per GPU"): ``allowMultipleAllocations: true`` and
the request policies decided for issue 26 (/work/notes/dra-common.md DECISIONS): ``memory``
defaults to the whole card, 1Mi steps from 1Mi; ``cores`` defaults to 0 (a memory-only claim
reserves no SMs and CUDA_DEVICE_SM_LIMIT 0 means "no limit"), 0..100 in steps of 1.  Without a
default the allocator would charge the full value of every capacity a claim does not name.
Split count 1 publishes whole GPUs: values only (the API forbids policies there).

:func:`desired_slice` compares with what the API server holds and bumps ``pool.generation``
only when the content changed, so an unchanged inventory costs no write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.node.register import device_type
from hami_protocol.dra_driver import (
    ATTR_INDEX,
    ATTR_MODEL,
    ATTR_NUMA,
    ATTR_PCIE_ROOT,
    ATTR_UUID,
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    DRIVER,
    RESOURCE_API_VERSION,
    device_name,
)

__all__ = [
    "MAX_DEVICES",
    "SliceOptions",
    "desired_slice",
    "gpu_device",
    "memory_quantity",
    "slice_devices",
    "slice_name",
]

MAX_DEVICES: Final = 128
"""Devices one slice may hold (the API's limit)."""
_MAX_ATTRIBUTE: Final = 64
"""The longest string attribute the API accepts."""
_UNITS: Final = (("Ti", 1024 * 1024), ("Gi", 1024), ("Mi", 1))


@dataclass(frozen=True, slots=True)
class SliceOptions:
    node_name: str
    shared: bool = True
    """Publish shared GPUs (allowMultipleAllocations and request policies)."""
    memory_scaling: float = 1.0
    core_scaling: float = 1.0


def memory_quantity(mib: int) -> str:
    """MiB as the canonical binary quantity (``16384`` → ``"16Gi"``, ``15360`` → ``"15Gi"``)."""
    for unit, size in _UNITS:
        if mib % size == 0 and mib >= size:
            return f"{mib // size}{unit}"
    return f"{mib}Mi"


def _string(value: str) -> dict[str, str]:
    return {"string": value[:_MAX_ATTRIBUTE]}


def gpu_device(gpu: Gpu, options: SliceOptions) -> dict[str, Any]:
    """The slice device of one GPU."""
    memory = memory_quantity(int(gpu.memory_mib * options.memory_scaling))
    cores = str(int(options.core_scaling * 100))
    attributes: dict[str, Any] = {
        ATTR_UUID: _string(gpu.uuid),
        ATTR_MODEL: _string(device_type(gpu.model)),
        ATTR_INDEX: {"int": gpu.index},
        ATTR_NUMA: {"int": max(gpu.numa, 0)},
    }
    if gpu.pcie_root:
        attributes[ATTR_PCIE_ROOT] = _string(gpu.pcie_root)
    device: dict[str, Any] = {"name": device_name(gpu.index), "attributes": attributes}
    if options.shared:
        device["allowMultipleAllocations"] = True
        device["capacity"] = {
            CAPACITY_MEMORY: {
                "value": memory,
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
                },
            },
            CAPACITY_CORES: {
                "value": cores,
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": cores, "step": "1"},
                },
            },
        }
    else:
        device["capacity"] = {CAPACITY_MEMORY: {"value": memory}, CAPACITY_CORES: {"value": cores}}
    return device


def slice_devices(gpus: Iterable[Gpu], options: SliceOptions) -> list[dict[str, Any]]:
    """The healthy GPUs' devices, in index order (at most :data:`MAX_DEVICES`)."""
    healthy = sorted((g for g in gpus if g.healthy), key=lambda g: g.index)
    return [gpu_device(gpu, options) for gpu in healthy[:MAX_DEVICES]]


def slice_name(node_name: str) -> str:
    """``<node>-gpu-hami-io`` (the emulator's builders use the same name)."""
    return f"{node_name}-{DRIVER.replace('.', '-')}"


def _spec(node_name: str, devices: list[dict[str, Any]], generation: int) -> dict[str, Any]:
    return {
        "driver": DRIVER,
        "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
        "nodeName": node_name,
        "devices": devices,
    }


def _same_content(spec: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    pool = spec.get("pool")
    return (
        isinstance(pool, Mapping)
        and pool.get("name") == wanted["pool"]["name"]
        and pool.get("resourceSliceCount") == 1
        and spec.get("driver") == DRIVER
        and spec.get("nodeName") == wanted["nodeName"]
        and (spec.get("devices") or []) == wanted["devices"]
    )


def desired_slice(
    current: Mapping[str, Any] | None,
    devices: list[dict[str, Any]],
    *,
    node_name: str,
    node_uid: str,
) -> dict[str, Any] | None:
    """The slice to write (create when ``current`` is None, else replace it), or None when
    ``current`` already says it all.  A replacement keeps ``metadata`` (name,
    resourceVersion) and bumps ``pool.generation``."""
    if current is None:
        owner = {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
        return {
            "apiVersion": RESOURCE_API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "name": slice_name(node_name),
                "ownerReferences": [{**owner, "controller": True}] if node_uid else [],
            },
            "spec": _spec(node_name, devices, 1),
        }
    spec = current.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    pool = spec.get("pool")
    generation = pool.get("generation") if isinstance(pool, Mapping) else None
    generation = generation if isinstance(generation, int) and generation > 0 else 0
    if _same_content(spec, _spec(node_name, devices, generation)):
        return None
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": dict(current.get("metadata") or {}),
        "spec": _spec(node_name, devices, generation + 1),
    }
