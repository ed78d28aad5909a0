"""Usage beside allocation: the vGPU monitors' figures joined into the map document.

Pure: samples in (what :mod:`.monitors` parsed from a monitor's ``/metrics``), plain data out.

* :func:`read_figures` keeps, of one monitor's samples, the per-container series
  (``hami_vgpu_memory_used_bytes``, ``hami_vgpu_memory_limit_bytes``,
  ``hami_container_device_utilization_ratio``; labels ``namespace``, ``pod``, ``container``,
  ``device_uuid``) and the host series (``hami_host_gpu_memory_used_bytes``,
  ``hami_host_gpu_utilization_ratio``; label ``device_uuid``), summed per pod and card, per card,
  and per card from the host.  HAMi's earlier names (``vGPU_device_memory_usage_in_bytes``...,
  labels ``podnamespace``, ``podname``, ``deviceuuid``) are read when a monitor exports only
  those (HAMi before 2.7, or ``--legacy-metrics`` alone): a rename must not blank the map.
* :func:`apply_usage` fills the map's ``usage`` fields (docs/gpumap.md): a card's from the host
  series when the monitor has them (``source: host``, NVML's view, every process), else the sum
  of its containers' (``source: containers``); a holder's from its pod's containers on that card.
  Missing figures are ``null`` — never 0 — and values over the limit or over 100 % are kept as
  they are and flagged ``overLimit``, not clamped.

Cards are matched on the first 40 characters of their UUID: the monitor labels devices so, as
HAMi's does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from hami_kube.timefmt import format_time

__all__ = [
    "HOST",
    "LEGACY",
    "UUID_CHARS",
    "WANTED",
    "Figures",
    "MonitorFigures",
    "NodeReading",
    "apply_usage",
    "read_figures",
]

MIB: Final = 1 << 20
UUID_CHARS: Final = 40
"""The monitor labels a device with the first 40 characters of its UUID (as HAMi's)."""

# Family → which figure it is, and its labels (namespace, pod, container, device UUID).
_CONTAINER_LABELS: Final = ("namespace", "pod", "container", "device_uuid")
_LEGACY_LABELS: Final = ("podnamespace", "podname", "ctrname", "deviceuuid")
CONTAINERS: Final[Mapping[str, str]] = {
    "hami_vgpu_memory_used_bytes": "used",
    "hami_vgpu_memory_limit_bytes": "limit",
    "hami_container_device_utilization_ratio": "utilization",
}
LEGACY: Final[Mapping[str, str]] = {
    "vGPU_device_memory_usage_in_bytes": "used",
    "vGPU_device_memory_limit_in_bytes": "limit",
    "Device_utilization_desc_of_container": "utilization",
}
HOST: Final[Mapping[str, str]] = {
    "hami_host_gpu_memory_used_bytes": "used",
    "hami_host_gpu_utilization_ratio": "utilization",
}
_LEGACY_HOST: Final[Mapping[str, str]] = {
    "HostGPUMemoryUsage": "used",
    "HostCoreUtilization": "utilization",
}
WANTED: Final = frozenset({*CONTAINERS, *LEGACY, *HOST, *_LEGACY_HOST})
"""Every family :func:`read_figures` reads (a scraper may drop the other lines unparsed)."""

PodCard = tuple[str, str, str]
"""``(namespace, pod, device UUID[:40])``."""


@dataclass(frozen=True, slots=True)
class Figures:
    """What was measured; ``None``: not reported (never 0 for missing)."""

    used_bytes: float | None = None
    limit_bytes: float | None = None
    utilization: float | None = None
    """Percent of the card (HAMi's monitor may report over 100: kept, and flagged)."""

    def plus(self, other: Figures) -> Figures:
        return Figures(
            _add(self.used_bytes, other.used_bytes),
            _add(self.limit_bytes, other.limit_bytes),
            _add(self.utilization, other.utilization),
        )


def _add(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b


@dataclass(frozen=True, slots=True)
class MonitorFigures:
    """One monitor's figures, summed per pod and card, per card, and from the host per card."""

    pods: Mapping[PodCard, Figures] = field(default_factory=dict)
    cards: Mapping[str, Figures] = field(default_factory=dict)
    host: Mapping[str, Figures] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeReading:
    """One node's monitor as last asked: where, when, its figures or why there are none."""

    url: str | None
    at: datetime | None = None
    """When the figures were read (``None``: never)."""
    error: str | None = None
    figures: MonitorFigures | None = None


Sample = tuple[str, Mapping[str, str], float]
"""``(name, labels, value)`` of one sample."""


def _figure(kind: str, value: float) -> Figures:
    if kind == "used":
        return Figures(used_bytes=value)
    if kind == "limit":
        return Figures(limit_bytes=value)
    return Figures(utilization=value)


def _merge(into: MutableMapping[Any, Figures], key: Any, figures: Figures) -> None:
    held = into.get(key)
    into[key] = figures if held is None else held.plus(figures)


def read_figures(samples: Iterable[Sample]) -> MonitorFigures:
    """The figures of one monitor's samples (other families are ignored; NaN is not a figure)."""
    current: dict[tuple[str, str, str, str], Figures] = {}
    legacy: dict[tuple[str, str, str, str], Figures] = {}
    host: dict[str, Figures] = {}
    legacy_host: dict[str, Figures] = {}
    for name, labels, value in samples:
        if math.isnan(value):
            continue
        if name in CONTAINERS:
            key = tuple(labels.get(label, "") for label in _CONTAINER_LABELS)
            _merge(current, key, _figure(CONTAINERS[name], value))
        elif name in LEGACY:
            key = tuple(labels.get(label, "") for label in _LEGACY_LABELS)
            _merge(legacy, key, _figure(LEGACY[name], value))
        elif name in HOST:
            uuid = labels.get("device_uuid", "")[:UUID_CHARS]
            _merge(host, uuid, _figure(HOST[name], value))
        elif name in _LEGACY_HOST:
            uuid = labels.get("deviceuuid", "")[:UUID_CHARS]
            _merge(legacy_host, uuid, _figure(_LEGACY_HOST[name], value))
    # A monitor with --legacy-metrics exports both names: count each container once.
    containers = current or legacy
    pods: dict[PodCard, Figures] = {}
    cards: dict[str, Figures] = {}
    for (namespace, pod, _, uuid), figures in containers.items():
        card = uuid[:UUID_CHARS]
        _merge(pods, (namespace, pod, card), figures)
        _merge(cards, card, figures)
    return MonitorFigures(pods, cards, host or legacy_host)


def _mib(value: float | None) -> int | None:
    """Bytes → MiB, rounded up: a container holding any memory shows at least 1 MiB."""
    return None if value is None else math.ceil(value / MIB)


def _percent(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _over(used: float | None, limit: float | None, utilization: float | None) -> bool:
    over_memory = used is not None and limit is not None and limit > 0 and used > limit
    return over_memory or (utilization is not None and utilization > 100)


def _holder_usage(holder: Mapping[str, Any], figures: Figures | None) -> dict[str, Any] | None:
    if figures is None:
        return None
    # The limit HAMi-core enforces, as the monitor reports it; else what the scheduler allocated.
    limit = figures.limit_bytes
    if not limit:
        allocated = holder.get("memory")
        limit = allocated * MIB if isinstance(allocated, int) and allocated > 0 else None
    return {
        "memoryUsed": _mib(figures.used_bytes),
        "memoryLimit": _mib(limit),
        "utilization": _percent(figures.utilization),
        "overLimit": _over(figures.used_bytes, limit, figures.utilization),
    }


def _device_usage(
    device: Mapping[str, Any], figures: MonitorFigures, at: str | None
) -> dict[str, Any] | None:
    card = str(device.get("id", ""))[:UUID_CHARS]
    found, source = figures.host.get(card), "host"
    if found is None:
        found, source = figures.cards.get(card), "containers"
    if found is None:
        return None
    total = device.get("memory", {}).get("total")
    capacity = total * MIB if isinstance(total, int) and total > 0 else None
    return {
        "memoryUsed": _mib(found.used_bytes),
        "utilization": _percent(found.utilization),
        "source": source,
        "at": at,
        "overLimit": _over(found.used_bytes, capacity, found.utilization),
    }


def _monitor(reading: NodeReading, now: datetime) -> dict[str, Any]:
    at = reading.at
    return {
        "url": reading.url,
        "at": None if at is None else format_time(at),
        "ageSeconds": None if at is None else max(round((now - at).total_seconds(), 1), 0.0),
        "error": reading.error,
    }


def apply_usage(
    nodes: Iterable[MutableMapping[str, Any]],
    readings: Mapping[str, NodeReading],
    *,
    now: datetime,
) -> None:
    """Fill, in place, each map node's ``monitor`` and its cards' and holders' ``usage`` from
    ``readings`` (by node name).  A node without a reading keeps ``monitor: null`` and null
    usage; a card of a vendor this scheduler does not handle (``raw``) never has usage."""
    for node in nodes:
        reading = readings.get(str(node.get("name")))
        if reading is None:
            node["monitor"] = None
            continue
        node["monitor"] = _monitor(reading, now)
        figures = reading.figures
        if figures is None:
            continue
        at = None if reading.at is None else format_time(reading.at)
        for device in node.get("devices", ()):
            if "raw" in device:
                continue
            device["usage"] = _device_usage(device, figures, at)
            card = str(device.get("id", ""))[:UUID_CHARS]
            for holder in device.get("holders", ()):
                key = (str(holder.get("namespace")), str(holder.get("pod")), card)
                holder["usage"] = _holder_usage(holder, figures.pods.get(key))
