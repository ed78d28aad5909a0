"""Pure: the device list the kubelet sees.  Each GPU is advertised as ``split`` replicas
``<UUID>-<i>`` (i = 0..split-1) sharing the GPU's health and, when NUMA topology is on, its NUMA
node; the node's ``nvidia.com/gpu`` capacity is therefore GPUs × split.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami_deviceplugin.gpu.backends.base import Gpu

__all__ = ["PluginDevice", "plugin_devices", "replica_id", "replica_owners"]


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One advertised replica; ``numa`` is ``None`` when no topology hint is given."""

    id: str
    healthy: bool
    numa: int | None = None


def replica_id(uuid: str, number: int) -> str:
    return f"{uuid}-{number}"


def plugin_devices(
    gpus: Iterable[Gpu], *, split: int, numa_topology: bool
) -> tuple[PluginDevice, ...]:
    """Every replica of every GPU, GPU by GPU."""
    return tuple(
        PluginDevice(
            id=replica_id(gpu.uuid, number),
            healthy=gpu.healthy,
            numa=max(gpu.numa, 0) if numa_topology else None,
        )
        for gpu in gpus
        for number in range(split)
    )


def replica_owners(gpus: Iterable[Gpu], *, split: int) -> Mapping[str, str]:
    """Replica ID → GPU UUID, for every replica advertised."""
    return {replica_id(gpu.uuid, number): gpu.uuid for gpu in gpus for number in range(split)}
