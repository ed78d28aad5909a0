"""Which ResourceSlices count for one node, grouped into pools (contract §3.2).

1. Candidate slices: ``spec.nodeName`` is the node, ``spec.allNodes``, a ``spec.nodeSelector``
   that selects the node, or ``perDeviceNodeSelection`` (each device then says for itself);
   slices with ``sharedCounters`` always join their pool.
2. Grouped by ``(driver, pool.name)``; only slices of the highest ``pool.generation`` count; the
   pool is *incomplete* while fewer slices of that generation are seen than
   ``pool.resourceSliceCount`` says, and *invalid* when a device name repeats.  The allocator
   skips both (an ``All`` request fails on them instead).
3. Order, which first-fit depends on: pools by driver then pool name (1.36+; older releases
   iterate a Go map), slices by ``metadata.name``, devices as listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_kube.objects import NodeView
from hami_kubesim.dra.model import Device, InvalidObjectError, parse_device
from hami_kubesim.scheduler.predicates import node_selector_matches

__all__ = ["Pool", "gather_pools"]


@dataclass(frozen=True, slots=True)
class Pool:
    driver: str
    name: str
    generation: int
    devices: tuple[Device, ...]
    incomplete: bool = False
    invalid: str = ""  # why the pool cannot be used, when it cannot

    @property
    def usable(self) -> bool:
        return not self.incomplete and not self.invalid

    def __str__(self) -> str:
        return f"{self.driver}/{self.name}"


def gather_pools(slices: Iterable[Mapping[str, Any]], node: NodeView) -> tuple[Pool, ...]:
    """The pools ``node`` can use, in allocation order (see the module docstring)."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for raw in slices:
        spec = raw.get("spec") or {}
        if not _slice_for_node(spec, node):
            continue
        pool = spec.get("pool") or {}
        grouped.setdefault((str(spec.get("driver") or ""), str(pool.get("name") or "")), []).append(
            raw
        )
    return tuple(
        _pool(driver, name, grouped[driver, name], node) for driver, name in sorted(grouped)
    )


def _slice_for_node(spec: Mapping[str, Any], node: NodeView) -> bool:
    if spec.get("sharedCounters"):
        return True
    if spec.get("nodeName"):
        return bool(spec.get("nodeName") == node.name)
    if spec.get("allNodes") is True or spec.get("perDeviceNodeSelection") is True:
        return True
    selector = spec.get("nodeSelector")
    return isinstance(selector, Mapping) and node_selector_matches(selector, node)


def _pool(driver: str, name: str, slices: list[Mapping[str, Any]], node: NodeView) -> Pool:
    generation = max(_int((s.get("spec") or {}).get("pool", {}).get("generation")) for s in slices)
    current = sorted(
        (s for s in slices if _int(s["spec"]["pool"].get("generation")) == generation),
        key=lambda s: str((s.get("metadata") or {}).get("name") or ""),
    )
    expected = _int(current[0]["spec"]["pool"].get("resourceSliceCount")) or 1
    devices: list[Device] = []
    invalid = ""
    try:
        for raw in current:
            devices.extend(_devices(raw, driver, name, node))
    except InvalidObjectError as exc:
        invalid = str(exc)
    names = [d.id.device for d in devices]
    if not invalid and len(set(names)) != len(names):
        invalid = f"duplicate device name in pool {driver}/{name}"
    return Pool(driver, name, generation, tuple(devices), len(current) < expected, invalid)


def _devices(raw: Mapping[str, Any], driver: str, pool: str, node: NodeView) -> Iterable[Device]:
    spec = raw.get("spec") or {}
    per_device = spec.get("perDeviceNodeSelection") is True
    for entry in spec.get("devices") or ():
        if not isinstance(entry, Mapping):
            raise InvalidObjectError(f"pool {driver}/{pool}: a device is not an object")
        if per_device and not _device_for_node(entry, node):
            continue
        node_name = entry.get("nodeName") if per_device else spec.get("nodeName")
        selector = entry.get("nodeSelector") if per_device else spec.get("nodeSelector")
        yield parse_device(
            entry,
            driver=driver,
            pool=pool,
            node_local=bool(node_name),
            node_selector=selector if isinstance(selector, Mapping) else None,
        )


def _device_for_node(entry: Mapping[str, Any], node: NodeView) -> bool:
    if entry.get("nodeName"):
        return bool(entry.get("nodeName") == node.name)
    if entry.get("allNodes") is True:
        return True
    selector = entry.get("nodeSelector")
    return isinstance(selector, Mapping) and node_selector_matches(selector, node)


def _int(raw: object) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else 0
