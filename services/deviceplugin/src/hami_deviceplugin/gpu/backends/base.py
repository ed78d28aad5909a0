"""What every GPU backend reports, and the small interface the service drives backends through.

A backend discovers the node's GPUs once (:meth:`Backend.open`), then reports every later change
(health above all) as a new complete list from :meth:`Backend.updates`, can sample live usage
for the vGPU monitor's host gauges, and reads the links between its GPUs (:meth:`Backend.links`,
what the topology pair scores are computed from).  (Its NIC twin is
:class:`hami_deviceplugin.rdma.sources.NicSource`.)
Backends never block the event loop: blocking library calls run in threads.  ``close`` is awaited
on shutdown under the lifecycle's bound, so a driver call that never returns cannot keep the
daemon alive.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from hami_deviceplugin.gpu.mig.model import MigCapability
from hami_protocol.topology.links import LinkTable

__all__ = ["CLOSE_WITHIN_S", "Backend", "Gpu", "GpuUsage"]

CLOSE_WITHIN_S: Final = 3.0
"""The bound a service gives :meth:`Backend.close` on shutdown (an NVML event wait in flight
returns within a second)."""


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU as discovered.

    ``numa`` is the NUMA node (0 when unknown); ``pci_bus_id``, ``pcie_switch`` and
    ``pcie_root`` are normalised addresses or "" when unknown; ``reason`` says why an unhealthy
    GPU is unhealthy; ``mig`` is what the GPU offers for MIG (None: not MIG-capable).
    """

    uuid: str
    index: int
    model: str
    memory_mib: int
    numa: int = 0
    healthy: bool = True
    pci_bus_id: str = ""
    pcie_switch: str = ""
    pcie_root: str = ""
    reason: str = ""
    mig: MigCapability | None = None


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """Live figures for one GPU; ``None`` where the backend has no real value."""

    memory_used_bytes: int | None = None
    utilization_percent: float | None = None
    memory_utilization_percent: float | None = None


class Backend(Protocol):
    """The interface :mod:`hami_deviceplugin.app` uses."""

    @property
    def name(self) -> str: ...

    async def open(self) -> tuple[Gpu, ...]:
        """Discover the GPUs; raises :class:`~hami_deviceplugin.errors.BackendError` when the
        backend cannot work."""
        ...

    def updates(self) -> AsyncIterator[tuple[Gpu, ...]]:
        """Every later complete GPU list that differs from the previous one, until cancelled."""
        ...

    async def usage(self) -> Mapping[str, GpuUsage]:
        """Live usage by GPU UUID (empty when the backend has none)."""
        ...

    async def links(self) -> LinkTable:
        """The links of every ordered pair of GPUs as they are now (read afresh each call: a GPU
        reset can change them); a pair whose links cannot be read is left out."""
        ...

    async def close(self) -> None: ...
