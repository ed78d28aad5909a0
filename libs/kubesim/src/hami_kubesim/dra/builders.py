"""Plain-dict ``resource.k8s.io/v1`` objects shaped as HAMi's DRA driver publishes and claims
them (driver ``gpu.hami.io``), for tests and demos.

The request policies are the shared decision (see docs/kubesim.md, "DRA allocation"):
``memory`` defaults to the whole card and rounds up to whole MiB; ``cores`` defaults to 0, so a
memory-only claim takes no cores and several of them share one GPU.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "DRIVER",
    "device_class",
    "gpu_device",
    "gpu_slice",
    "resource_claim",
]

DRIVER: Final = "gpu.hami.io"


def gpu_device(
    index: int,
    *,
    memory: str = "16Gi",
    shared: bool = True,
    model: str = "NVIDIA-A100",
    uuid: str | None = None,
) -> dict[str, Any]:
    """One GPU as a device; ``shared`` publishes ``allowMultipleAllocations`` and the policies."""
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {
            "uuid": {"string": uuid or f"GPU-{index:08d}"},
            "model": {"string": model},
            "index": {"int": index},
        },
        "capacity": {"memory": {"value": memory}, "cores": {"value": "100"}},
    }
    if shared:
        device["allowMultipleAllocations"] = True
        device["capacity"]["memory"]["requestPolicy"] = {
            "default": memory,
            "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
        }
        device["capacity"]["cores"]["requestPolicy"] = {
            "default": "0",
            "validRange": {"min": "0", "max": "100", "step": "1"},
        }
    return device


def gpu_slice(
    node: str,
    devices: list[dict[str, Any]],
    *,
    generation: int = 1,
    slice_count: int = 1,
    name: str | None = None,
    pool: str | None = None,
) -> dict[str, Any]:
    """A node-local ResourceSlice (pool named after the node)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}-{generation}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {
                "name": pool or node,
                "generation": generation,
                "resourceSliceCount": slice_count,
            },
            "devices": devices,
        },
    }


def device_class(name: str = DRIVER, *, expression: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": expression or f'device.driver == "{DRIVER}"'}}]
        },
    }


def resource_claim(
    name: str,
    *,
    namespace: str = "default",
    memory: str | None = None,
    cores: str | None = None,
    count: int = 1,
    selectors: tuple[str, ...] = (),
    device_class_name: str = DRIVER,
) -> dict[str, Any]:
    """A claim with one request ``gpu`` for ``count`` GPUs, each with the given capacity."""
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "count": count}
    requests = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    if requests:
        exactly["capacity"] = {"requests": requests}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
