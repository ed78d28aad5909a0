"""A check of the nvml backend on a real GPU machine: ``python -m
hami_deviceplugin.gpu.nvml_smoke``.

It touches no cluster: it discovers the GPUs through NVML exactly as the plugin does, prints each
GPU (UUID, index, model, memory, PCI bus id, NUMA node, PCIe switch/root, health), the live
usage figures the metrics endpoint would export, the replicas the kubelet would be offered and
the ``hami.io/node-nvidia-register`` value the plugin would write; then the RDMA NICs sysfs
discovery finds (PCIe switch and root from the same walk as the GPUs, health, VFs, uverbs
devices) and the ``hami.io/node-rdma-register`` value.  With ``--watch N`` it then listens for
NVML health events for N seconds and prints every change.

MIG: per MIG-capable GPU its MIG mode, instances, profiles and possible placements, and the
register value a ``mig`` node would write (the chart's allow-list).  The MIG mode is never
changed.  Only with ``HAMI_SMOKE_MIG_CREATE=1`` in the environment, on one GPU already in MIG
mode that runs no process, one instance of its smallest profile is created at its last free
placement, printed and destroyed again (``mig_create``).

Exit status: 0 when at least one GPU was found, 1 when NVML works but finds none, 2 when the
backend cannot start (no driver, no libnvidia-ml).  ``scripts/nvml_smoke.sh`` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hami_deviceplugin.errors import BackendError, MigError
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.backends.nvml import NvmlBackend, parse_health_env
from hami_deviceplugin.gpu.mig.model import overlaps
from hami_deviceplugin.gpu.mig.nvml_control import NvmlMigControl
from hami_deviceplugin.gpu.replicas import plugin_devices
from hami_deviceplugin.node.register import register_value
from hami_deviceplugin.rdma.discovery import discover_nics
from hami_deviceplugin.rdma.nics import Nic, rdma_register_value
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.config.node import NodeSettings

MIG_CREATE_ENV = "HAMI_SMOKE_MIG_CREATE"

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
    mig_create: bool = False,
) -> int:
    """Run the check; ``nvml`` replaces the ``pynvml`` module (tests); ``mig_create``: create
    and destroy one MIG instance (see the module docstring)."""
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
        await _mig(backend.mig_control(), gpus, create=mig_create)
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


async def _mig(control: NvmlMigControl, gpus: Sequence[Gpu], *, create: bool) -> None:
    capable = [gpu for gpu in gpus if gpu.mig is not None]
    allowlist = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML).nvidia.mig_profile_allowlist
    node = NodeSettings(operating_mode="mig")
    _print("mig_register", json.loads(register_value(gpus, node, mig_allowlist=allowlist)))
    for gpu in capable:
        assert gpu.mig is not None
        try:
            state = await control.state(gpu.uuid)
            busy = await control.busy(gpu.uuid)
        except MigError as exc:
            _print("error", f"MIG of {gpu.uuid}: {exc}")
            continue
        _print(
            "mig",
            {
                "uuid": gpu.uuid,
                "mode": state.mode,
                "busy": busy,
                "full_sms": gpu.mig.full_sms,
                "profiles": [dataclasses.asdict(p) for p in gpu.mig.profiles],
                "instances": [dataclasses.asdict(i) for i in state.instances],
            },
        )
        if create and state.mode == "enabled" and not busy:
            await _create_one(control, gpu, [i.placement for i in state.instances])
            create = False
    if create:
        _print("mig_create", {"skipped": "no idle GPU in MIG mode"})


async def _create_one(control: NvmlMigControl, gpu: Gpu, taken: Sequence[Any]) -> None:
    assert gpu.mig is not None
    smallest = min(gpu.mig.profiles, key=lambda p: (p.slice_count, p.memory_mb))
    free = [s for s in smallest.placements if not any(overlaps(s, t) for t in taken)]
    if not free:
        _print("mig_create", {"uuid": gpu.uuid, "skipped": f"no free {smallest.name} placement"})
        return
    try:
        made = await control.create(gpu.uuid, smallest, free[-1])
    except MigError as exc:
        _print("error", f"MIG create on {gpu.uuid}: {exc}")
        return
    _print("mig_create", {"created": dataclasses.asdict(made)})
    try:
        await control.destroy(gpu.uuid, made.gi_id)
    except MigError as exc:
        _print("error", f"MIG destroy on {gpu.uuid} (instance {made.gi_id} is LEFT): {exc}")
        return
    left = [i for i in (await control.state(gpu.uuid)).instances if i.gi_id == made.gi_id]
    _print("mig_create", {"destroyed": made.gi_id, "gone": not left})


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
            mig_create=os.environ.get(MIG_CREATE_ENV) == "1",
        )
    )


if __name__ == "__main__":
    sys.exit(main())
