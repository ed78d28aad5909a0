"""The RDMA side of the scheduler's cache: per node a
:class:`~hami_scheduler.core.joint.nics.NicUsage`.

:class:`NicCache` is owned by :class:`~hami_scheduler.cache.view.SchedulerCache`, which tells it
when a node's NIC layout inputs change and when a pod's effective holding gains or loses a
:class:`~hami_scheduler.cache.pods.PodNicAllocation`.  It keeps

* ``usages``: node name → :class:`NicUsage`, for every node that has a NIC layout — an RDMA
  register annotation (a garbage one gives a layout without NICs, so GPU claims still work), GPUs
  whose register names their PCI placement, or pods holding NICs or claims there.  Nodes without
  any of these have no entry: they have no NICs and every GPU is a PCIe scope of its own, which
  is what :func:`~hami_scheduler.core.joint.decide.select_joint` assumes for a missing entry;
* per node, per pod UID, the pod's :class:`PodNicAllocation` and the
  :class:`~hami_scheduler.core.joint.nics.NicPodUsage` computed from it against the node's layout.
  What a pod holds depends on the layout (a VF's bus id names its NIC only through the register),
  so a changed layout recomputes every pod on that node, and a pod seen before its node is kept
  with nothing applied until the node arrives;
* ``gpu_claimed``: the nodes where some pod holds an exclusive PCIe claim on GPUs — the filter
  sends pods without Koordinator requests through the joint decision only for these.

Costs: a pod event O(its NICs + claims); a layout change O(pods holding NICs on that node).
Nodes and pods without NIC annotations or PCI placement cost nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from hami_protocol.errors import ProtocolError
from hami_protocol.node.registry import DeviceInfo
from hami_scheduler.cache.nodes import NodeFacts
from hami_scheduler.cache.pods import PodNicAllocation
from hami_scheduler.core.joint.nics import (
    NicLayout,
    NicPodUsage,
    NicUsage,
    apply_nic_usage,
    build_nic_usage,
    gpu_places,
    nic_layout,
    remove_nic_usage,
)
from hami_scheduler.core.joint.wire import nic_usage_from_annotations

__all__ = ["NO_NIC_USAGE", "NicCache", "nic_layout_of", "nic_pod_usage_of"]

NO_NIC_USAGE: Final = NicPodUsage()


def _placed(devices: Mapping[str, Sequence[DeviceInfo]]) -> bool:
    return any(
        info.pci_bus_id or info.pcie_switch or info.pcie_root
        for group in devices.values()
        for info in group
    )


def nic_layout_of(facts: NodeFacts, *, force: bool = False) -> NicLayout | None:
    """The node's NIC layout: its NICs (none when the register is unreadable) and where its
    GPUs sit.  ``None`` when it would say nothing (no register, no placement) unless ``force``."""
    devices = {r.word: r.devices for r in facts.registrations if not r.error}
    if not (force or facts.rdma_raw or _placed(devices)):
        return None
    return nic_layout(facts.name, facts.nics, gpus=gpu_places(devices))


def nic_pod_usage_of(written: PodNicAllocation, layout: NicLayout) -> NicPodUsage:
    """What ``written`` holds on ``layout``'s node.  The pod cache only keeps lists that decode;
    a value that still cannot be read (a bad quantity inside) holds nothing."""
    try:
        return nic_usage_from_annotations(
            dict(written.annotations),
            layout=layout,
            init_count=written.init_count,
            init_finished=written.init_finished,
            gpu_uuids=written.gpu_uuids,
        )
    except (ProtocolError, ValueError, RecursionError):
        return NO_NIC_USAGE


@dataclass(slots=True)
class _Held:
    written: PodNicAllocation
    usage: NicPodUsage


class NicCache:
    """NIC usage and exclusive claims per node (see the module docstring)."""

    def __init__(self) -> None:
        self.usages: dict[str, NicUsage] = {}
        self.gpu_claimed: set[str] = set()
        self._facts: dict[str, NodeFacts] = {}
        self._held: dict[str, dict[str, _Held]] = {}

    # -- nodes -------------------------------------------------------------------------------
    def node_changed(self, facts: NodeFacts) -> None:
        """The node's registrations or RDMA register changed (or it was first seen)."""
        self._facts[facts.name] = facts
        self._refresh(facts.name)

    def node_removed(self, name: str) -> None:
        # Pods keep their written allocations: a returning node is rebuilt with them.
        self._facts.pop(name, None)
        self.usages.pop(name, None)
        self.gpu_claimed.discard(name)

    def problem(self, name: str) -> str | None:
        """Why the node's NICs cannot be used (its register annotation is unreadable)."""
        facts = self._facts.get(name)
        if facts is None or not facts.rdma_error:
            return None
        return facts.rdma_error

    def _refresh(self, name: str) -> None:
        facts = self._facts.get(name)
        held = self._held.get(name, {})
        layout = None if facts is None else nic_layout_of(facts, force=bool(held))
        if layout is None:
            self.usages.pop(name, None)
            self.gpu_claimed.discard(name)
            return
        for entry in held.values():
            entry.usage = nic_pod_usage_of(entry.written, layout)
        self._set(name, build_nic_usage(layout, [entry.usage for entry in held.values()]))

    def _set(self, name: str, usage: NicUsage) -> None:
        self.usages[name] = usage
        if usage.claims_gpus:
            self.gpu_claimed.add(name)
        else:
            self.gpu_claimed.discard(name)

    # -- pods --------------------------------------------------------------------------------
    def hold(self, uid: str, node: str, written: PodNicAllocation) -> None:
        """The pod now holds what ``written`` says on ``node``."""
        held = self._held.setdefault(node, {})
        usage = self.usages.get(node)
        if usage is None:
            held[uid] = _Held(written, NO_NIC_USAGE)
            self._refresh(node)
            return
        pod = nic_pod_usage_of(written, usage.layout)
        held[uid] = _Held(written, pod)
        if not pod.empty:
            self._set(node, apply_nic_usage(usage, (pod,)))

    def release(self, uid: str, node: str) -> None:
        """The pod no longer holds anything on ``node``."""
        held = self._held.get(node)
        entry = None if held is None else held.pop(uid, None)
        if held is not None and not held:
            del self._held[node]
        usage = self.usages.get(node)
        if entry is not None and usage is not None and not entry.usage.empty:
            self._set(node, remove_nic_usage(usage, (entry.usage,)))

    def pod_usage(self, uid: str, node: str) -> NicPodUsage | None:
        """What the pod is counted as holding on ``node`` (``None``: nothing recorded)."""
        entry = self._held.get(node, {}).get(uid)
        return None if entry is None else entry.usage

    def simulated(self, facts: NodeFacts, *, exclude_uid: str = "") -> NicUsage | None:
        """A throw-away :class:`NicUsage` for a Node object given in a request, with the pods
        this cache knows on that node name; changes nothing."""
        held = self._held.get(facts.name, {})
        others = [entry.written for uid, entry in held.items() if uid != exclude_uid]
        layout = nic_layout_of(facts, force=bool(others))
        if layout is None:
            return None
        return build_nic_usage(layout, [nic_pod_usage_of(written, layout) for written in others])
