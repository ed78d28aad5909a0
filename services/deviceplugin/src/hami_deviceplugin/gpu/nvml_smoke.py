"""A check of the nvml backend on a real GPU machine: ``python -m
hami_deviceplugin.gpu.nvml_smoke``.

It touches no cluster: it discovers the GPUs through NVML exactly as the plugin does, prints each
GPU (UUID, index, model, memory, PCI bus id, NUMA node, PCIe switch/root, health), the live
usage figures the metrics endpoint would export, the replicas the kubelet would be offered and
the ``hami.io/node-nvidia-register`` value the plugin would write; then the RDMA NICs sysfs
discovery finds (PCIe switch and root from the same walk as the GPUs, health, VFs, uverbs
devices) and the ``hami.io/node-rdma-register`` value.  With ``--watch N`` it then listens for
NVML health events for N seconds and prints every change.

Exit status: 0 when at least one GPU was found, 1 when NVML works but finds none, 2 when the
backend cannot start (no driver, no libnvidia-ml).  ``scripts/nvml_smoke.sh`` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.backends.nvml import NvmlBackend, parse_health_env
from hami_deviceplugin.gpu.replicas import plugin_devices
from hami_deviceplugin.node.register import register_value
from hami_deviceplugin.rdma.discovery import discover_nics
from hami_deviceplugin.rdma.nics import Nic, rdma_register_value
from hami_protocol.config.node import NodeSettings

__all__ = ["main", "smoke"]


def _print(kind: str, payload: object) -> None:
    print(json.dumps({"kind": kind, "data": payload}, sort_keys=True), flush=True)


async def smoke(
    *,
    sysfs_root: Path,
    node: NodeSettings,
    watch_s: float = 0.0,
    disable: str | None = None,
    nvml: Any = None,
) -> int:
    """Run the check; ``nvml`` replaces the ``pynvml`` module (tests)."""
    backend = NvmlBackend(
        nvml=nvml,
        sysfs_root=sysfs_root,
        health=parse_health_env(disable, None),
        preconfigured_memory_mib=node.preconfigured_device_memory,
    )
    try:
        gpus = await backend.open()
    except BackendError as exc:
        _print("error", str(exc))
        return 2
    try:
        for gpu in gpus:
            _print("gpu", dataclasses.asdict(gpu))
        usage = await backend.usage()
        _print("usage", {uuid: dataclasses.asdict(figures) for uuid, figures in usage.items()})
        replicas = plugin_devices(gpus, split=node.device_split_count, numa_topology=True)
        _print("replicas", [dataclasses.asdict(r) for r in replicas])
        _print("register", json.loads(register_value(gpus, node)))
        nics = await asyncio.to_thread(discover_nics, sysfs_root)
        for nic in nics:
            _print("nic", _nic(nic))
        _print("rdma_register", json.loads(rdma_register_value(nics)))
        if watch_s > 0:
            await _watch(backend, watch_s)
    finally:
        await backend.close()
    return 0 if gpus else 1


async def _watch(backend: NvmlBackend, seconds: float) -> None:
    async def follow() -> None:
        async for gpus in backend.updates():
            _print("health", [_health(gpu) for gpu in gpus])

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await follow()


def _nic(nic: Nic) -> dict[str, object]:
    info = nic.info
    return {
        "id": info.id,
        "name": info.name,
        "minor": info.minor,
        "numa": info.numa,
        "pcie_switch": info.pcie_switch,
        "pcie_root": info.pcie_root,
        "healthy": info.healthy,
        "reason": nic.reason,
        "uverbs": nic.uverbs,
        "vfs": [
            {"bus_id": vf.bus_id, "minor": vf.minor, "uverbs": nic.vf_uverbs.get(vf.bus_id, "")}
            for vf in info.vfs
        ],
    }


def _health(gpu: Gpu) -> dict[str, object]:
    return {"uuid": gpu.uuid, "healthy": gpu.healthy, "reason": gpu.reason}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nvml_smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--device-split-count", type=int, default=10)
    parser.add_argument("--device-memory-scaling", type=float, default=1.0)
    parser.add_argument("--device-cores-scaling", type=float, default=1.0)
    parser.add_argument("--preconfigured-device-memory", type=int, default=0)
    parser.add_argument("--watch", type=float, default=0.0, help="seconds to watch health events")
    parser.add_argument("--disable-healthchecks", default=None, help="as DP_DISABLE_HEALTHCHECKS")
    args = parser.parse_args(argv)
    node = NodeSettings(
        device_split_count=args.device_split_count,
        device_memory_scaling=args.device_memory_scaling,
        device_core_scaling=args.device_cores_scaling,
        preconfigured_device_memory=args.preconfigured_device_memory,
    )
    return asyncio.run(
        smoke(
            sysfs_root=Path(args.sysfs_root),
            node=node,
            watch_s=args.watch,
            disable=args.disable_healthchecks,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
