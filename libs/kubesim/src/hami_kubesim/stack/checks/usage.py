"""What the vGPU monitors report per container, and whether it matches what was allocated.

:func:`parse_usage` reads the per-container series of a monitor's ``/metrics``
(``hami_vgpu_memory_used_bytes``, ``hami_vgpu_memory_limit_bytes``,
``hami_container_device_utilization_ratio``; labels ``namespace``, ``pod``, ``container``,
``vdevice_index``, ``device_uuid``) into a :class:`MonitorUsage`; :func:`monitor_problems` checks
it against a cluster snapshot: every running pod's app container that the scheduler gave devices
(its ``hami.io/vgpu-devices-allocated`` entry) has exactly one series per device, in order, for
that device's UUID, with the limit the allocated memory in bytes; a container using DRA claims
the same for the devices and memory limits its CDI env names (which the ``dra-env`` invariant
holds to the claim's allocation).  Init containers are left out
(HAMi's monitor reports ``spec.containers`` only).  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from hami_kube.objects import PodView
from hami_kubesim.stack.checks.dra import dra_container_devices
from hami_kubesim.stack.checks.mig import container_reservations_of
from hami_kubesim.stack.state import ClusterState, Outcome, container_devices, outcome, pod_key

__all__ = [
    "LIMIT",
    "USED",
    "UTILIZATION",
    "ContainerKey",
    "DeviceReading",
    "MonitorUsage",
    "SampleLike",
    "monitor_problems",
    "parse_usage",
]

USED: Final = "hami_vgpu_memory_used_bytes"
LIMIT: Final = "hami_vgpu_memory_limit_bytes"
UTILIZATION: Final = "hami_container_device_utilization_ratio"
_MIB: Final = 1 << 20
_UUID_CHARS: Final = 40
"""The monitor labels a device with the first 40 characters of its UUID, as HAMi's."""

ContainerKey = tuple[str, str, str]
"""``(namespace, pod, container)``."""


class SampleLike(Protocol):
    """One sample of an exposition (:class:`~hami_kubesim.stack.metrics.Sample`)."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def value(self) -> float: ...


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One device of one container as the monitor reports it."""

    index: int
    uuid: str
    used_bytes: float | None = None
    limit_bytes: float | None = None
    utilization: float | None = None
    """Percent, 0-100."""


@dataclass(frozen=True, slots=True)
class MonitorUsage:
    """Every container the monitors report, its devices by ``vdevice_index``."""

    containers: Mapping[ContainerKey, tuple[DeviceReading, ...]] = field(default_factory=dict)

    def of(self, namespace: str, pod: str, container: str) -> tuple[DeviceReading, ...]:
        return self.containers.get((namespace, pod, container), ())

    def merged(self, other: MonitorUsage) -> MonitorUsage:
        return MonitorUsage({**self.containers, **other.containers})


_FIELDS: Final = {USED: "used_bytes", LIMIT: "limit_bytes", UTILIZATION: "utilization"}


def parse_usage(samples: Iterable[SampleLike]) -> MonitorUsage:
    """The per-container readings among ``samples`` (one monitor's scrape, or several)."""
    found: dict[ContainerKey, dict[tuple[int, str], dict[str, float]]] = {}
    for sample in samples:
        attribute = _FIELDS.get(sample.name)
        labels = sample.labels
        if attribute is None:
            continue
        try:
            index = int(labels.get("vdevice_index", ""))
        except ValueError:
            continue
        key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
        device = (index, labels.get("device_uuid", ""))
        found.setdefault(key, {}).setdefault(device, {})[attribute] = sample.value
    return MonitorUsage(
        {
            key: tuple(
                DeviceReading(
                    index,
                    uuid,
                    used_bytes=values.get("used_bytes"),
                    limit_bytes=values.get("limit_bytes"),
                    utilization=values.get("utilization"),
                )
                for (index, uuid), values in sorted(devices.items())
            )
            for key, devices in found.items()
        }
    )


def monitor_problems(state: ClusterState, usage: MonitorUsage) -> list[str]:
    """What the monitors miss or get wrong for the running pods of ``state`` (empty: all
    reported as allocated)."""
    problems: list[str] = []
    for pod in state.pods:
        if outcome(state, pod) is not Outcome.RUNNING:
            continue
        view = PodView(pod)
        apps = {c.name for c in view.containers}
        namespace = view.namespace or "default"
        instances = container_reservations_of(pod)
        wanted = [
            (name, [(d.uuid, d.usedmem) for d in devices])
            for index, (name, devices) in enumerate(container_devices(pod))
            # A MIG container runs without HAMi-core: no region, no series.
            if index not in instances
        ]
        for name, devices in [*wanted, *dra_container_devices(pod)]:
            if name in apps and devices:
                readings = usage.of(namespace, view.name, name)
                problems += _reading_problems(f"{pod_key(pod)} {name}", readings, devices)
    return problems


def _reading_problems(
    where: str, readings: tuple[DeviceReading, ...], devices: list[tuple[str, int]]
) -> list[str]:
    """What one container's series miss of its ``(UUID, memory MiB)`` devices."""
    if not readings:
        return [f"{where}: no series from the vGPU monitor"]
    if [r.index for r in readings] != list(range(len(devices))):
        return [
            f"{where}: vdevice_index {[r.index for r in readings]}, "
            f"{len(devices)} devices allocated"
        ]
    problems: list[str] = []
    for reading, (uuid, mib) in zip(readings, devices, strict=True):
        if reading.uuid != uuid[:_UUID_CHARS]:
            problems.append(f"{where} #{reading.index}: device {reading.uuid}")
        elif reading.limit_bytes != mib * _MIB:
            problems.append(
                f"{where} #{reading.index}: limit {reading.limit_bytes} bytes, "
                f"allocated {mib * _MIB} ({mib} MiB)"
            )
    return problems
