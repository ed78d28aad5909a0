"""Capacity totals: NVIDIA GPU memory and cores as two countable extended resources.

kube-scheduler's in-tree ``NodeResourcesFit`` (and so its default preemption up to 1.37, and the
cluster-autoscaler's simulation, which never calls extenders) can only count integer node-level
quantities.  In the *capacity totals* mode the node agent advertises, in node status, what the
scheduler's register annotation says the node holds, and the webhook writes into every container
what the scheduler will charge for it, under two names of our own:

* :data:`NVIDIA_MEMORY` ``hami.io/nvidia-memory`` — MiB.  Node: Σ ``devmem`` of the healthy
  registered NVIDIA devices (after ``deviceMemoryScaling``; a MIG-mode GPU counts its whole,
  unscaled memory, as it registers it).  Container: ``gpu × gpumem`` with the per-card MiB as the
  scheduler reads the request (unit × ``memoryFactor``, ``defaultMemory`` when none is named).
  A percentage or whole-card request names no MiB before a device is chosen and counts **0**.
* :data:`NVIDIA_CORES` ``hami.io/nvidia-cores`` — percent points of a card.  Node: Σ ``devcore``
  of the healthy registered NVIDIA devices (100 per card at ``deviceCoreScaling`` 1; a MIG GPU
  100).  Container: ``gpu × min(gpucores, 100)`` (the scheduler clamps a card's cores to 100).

Why this never refuses what the scheduler extender accepts: for every device it gives a
container, the extender checks ``devmem − used ≥ memreq`` and ``devcore − used ≥ min(cores,
100)`` and charges at least that much (a MIG instance charges its profile, ≥ the request), so
over the pods it placed on a node Σ container totals ≤ the node totals; a pod's in-tree request
(Σ app containers, max with each init container) is at most what the extender charges (per
device the larger of init peak and app sum).  Other vendors are not counted (they keep
``ignoredByScheduler``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from hami_protocol.node.registry import DeviceInfo, decode_node_devices
from hami_protocol.request.containers import ContainerDeviceRequest, pod_containers, vendor_request
from hami_protocol.vendor.table import Vendor

__all__ = [
    "MAX_CORES_PER_DEVICE",
    "NVIDIA_CORES",
    "NVIDIA_MEMORY",
    "TOTALS_RESOURCES",
    "ZERO",
    "Totals",
    "container_totals",
    "node_totals",
    "node_totals_from_register",
    "pod_totals",
    "request_totals",
]

NVIDIA_MEMORY: Final = "hami.io/nvidia-memory"
NVIDIA_CORES: Final = "hami.io/nvidia-cores"
TOTALS_RESOURCES: Final = (NVIDIA_MEMORY, NVIDIA_CORES)
MAX_CORES_PER_DEVICE: Final = 100
"""The scheduler clamps a device's cores to this (a card is 100 %)."""


@dataclass(frozen=True, slots=True)
class Totals:
    """``memory`` MiB and ``cores`` percent points."""

    memory: int = 0
    cores: int = 0

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.memory + other.memory, self.cores + other.cores)

    def peak(self, other: Totals) -> Totals:
        """Per resource, the larger of the two (an init container against the rest)."""
        return Totals(max(self.memory, other.memory), max(self.cores, other.cores))

    def resources(self) -> dict[str, str]:
        """The two names with their quantities as the API server writes them (``"8000"``)."""
        return {NVIDIA_MEMORY: str(self.memory), NVIDIA_CORES: str(self.cores)}

    def fits_in(self, other: Totals) -> bool:
        return self.memory <= other.memory and self.cores <= other.cores


ZERO: Final = Totals()


def request_totals(request: ContainerDeviceRequest | None) -> Totals:
    """What one container's NVIDIA request counts: ``nums × memreq`` (0 for a percentage
    request: ``memreq`` is then 0) and ``nums × min(coresreq, 100)``."""
    if request is None or request.nums <= 0:
        return ZERO
    cores = min(max(request.coresreq, 0), MAX_CORES_PER_DEVICE)
    return Totals(request.nums * max(request.memreq, 0), request.nums * cores)


def container_totals(container: Mapping[str, object], vendor: Vendor) -> Totals:
    """The totals of one container (decoded JSON) as the scheduler reads its ``vendor`` request.

    Raises :class:`~hami_protocol.errors.RequestError` for a container that is not one.
    """
    return request_totals(vendor_request(container, vendor))


def _restartable(container: Mapping[str, object]) -> bool:
    return container.get("restartPolicy") == "Always"


def pod_totals(pod: Mapping[str, object], vendor: Vendor) -> Totals:
    """The pod's totals as kube-scheduler and the kubelet add container requests up: app
    containers and sidecars (restartable init containers) add; each ordinary init container runs
    beside the sidecars started before it, and the pod needs the largest of those and the sum."""
    running = ZERO
    sidecars = ZERO
    init_peak = ZERO
    for is_init, container in pod_containers(pod):
        totals = container_totals(container, vendor)
        if not is_init:
            running += totals
        elif _restartable(container):
            running += totals
            sidecars += totals
            init_peak = init_peak.peak(sidecars)
        else:
            init_peak = init_peak.peak(sidecars + totals)
    return running.peak(init_peak)


def node_totals(devices: Iterable[DeviceInfo]) -> Totals:
    """Σ ``devmem`` and Σ ``devcore`` of the healthy devices."""
    memory = cores = 0
    for device in devices:
        if device.health:
            memory += max(device.devmem, 0)
            cores += max(device.devcore, 0)
    return Totals(memory, cores)


def node_totals_from_register(value: str | None) -> Totals:
    """The totals of a node whose register annotation is ``value`` (NVIDIA's
    ``hami.io/node-nvidia-register``); :data:`ZERO` when absent or empty.

    Raises :class:`~hami_protocol.errors.DecodeError` when the value does not decode (the
    scheduler then sees no devices either; the caller decides what to advertise).
    """
    if value is None or not value.strip():
        return ZERO
    return node_totals(decode_node_devices(value))
