"""What vendor fits need to know about the pod and the node beyond the devices and request.

:class:`VendorContext` rides in :attr:`FitContext.vendor <hami_scheduler.core.fit.FitContext>`;
its defaults describe a pod and node with no vendor facts, so the NVIDIA path never builds one.
:func:`vendor_context` builds it, for the vendors with rules of their own only, from three
sources the selection layer fills:

* :class:`VendorPodFacts` — the pod's annotations (``huawei.com/vnpu-mode``, MetaX sGPU QoS,
  app class, topology awareness) and the configuration defaults, in the
  :class:`~hami_scheduler.core.plan.PodPlan` (part of its memo key);
* :class:`NodeVendorFacts` — the node's vendor annotations and profiles (``hami-vnpu-core``,
  Enflame DRS profiles, MetaX topology losses and scores), in the node's
  :class:`~hami_scheduler.core.usage.node.NodeLayout` (a change rebuilds the layout);
* :class:`SgpuNodeState` — what the pods the cache holds on the node say about MetaX sGPU
  devices (their app classes, QoS the node does not report yet), looked up per node through
  the plan;

plus what the pod's earlier containers were given in the decision being made (the same-UUID
filter of Metax-GPU and Mthreads, QoS of the sGPU devices they took).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from hami_protocol.pod.devices import ContainerDevices

__all__ = [
    "METAX_SGPU",
    "NO_NODE_FACTS",
    "NO_POD_FACTS",
    "NO_SGPU_STATE",
    "NO_SGPU_TASKS",
    "NO_VENDOR_CONTEXT",
    "DrsProfile",
    "NodeVendorFacts",
    "SgpuNodeState",
    "SgpuStateLookup",
    "SgpuTasks",
    "VendorContext",
    "VendorPodFacts",
    "vendor_context",
]

METAX_SGPU: Final = "Metax-SGPU"
_WHOLE: Final = 100


@dataclass(frozen=True, slots=True)
class DrsProfile:
    """One Enflame DRS profile of the node (``"<slices>g.<GB>gb": "<profileID>"``)."""

    name: str
    profile_id: str
    slices: int
    memory_gb: int


@dataclass(frozen=True, slots=True)
class SgpuTasks:
    """The app classes of the pods running on one MetaX sGPU device."""

    online: int = 0
    """Pods of class ``online`` (``metax-tech.com/sgpu-app-class``) holding the device."""
    offline: int = 0
    """Pods of class ``offline`` holding the device."""


NO_SGPU_TASKS: Final = SgpuTasks()


@dataclass(frozen=True, slots=True)
class VendorContext:
    """Per-pod and per-node facts of the non-NVIDIA vendors (see the module doc)."""

    ascend_vnpu_mode: str = ""
    """Ascend: the pod's ``huawei.com/vnpu-mode`` (``hami-core``, ``template`` or ``""``)."""
    ascend_node_hami_core: bool = False
    """Ascend: the node runs hami-vnpu-core (node annotation ``hami-vnpu-core`` = ``"true"``,
    else the global ``vnpus.hamiVnpuCore``)."""
    drs_profiles: tuple[DrsProfile, ...] = ()
    """Enflame DRS: the node's profiles (``enflame.com/gcu-drs-capacity`` ``profiles``)."""
    pod_uuids: tuple[str, ...] = ()
    """Metax-GPU and Mthreads: UUIDs of this vendor the pod's earlier containers were given in
    this decision (their custom filter keeps every container on the same device)."""
    sgpu_qos: str = ""
    """MetaX sGPU: the pod's ``metax-tech.com/sgpu-qos-policy`` (webhook default
    ``best-effort``)."""
    sgpu_app_class: str = ""
    """MetaX sGPU: the pod's ``metax-tech.com/sgpu-app-class`` (``online``, ``offline``, ``""``)."""
    sgpu_topology_aware: bool = False
    """MetaX sGPU: ``metax-tech.com/sgpu-topology-aware`` (or the config's
    ``sgpuTopologyAware``)."""
    sgpu_tasks: Mapping[str, SgpuTasks] = field(default_factory=lambda: _NO_TASKS, hash=False)
    """MetaX sGPU: device UUID → the app classes of the pods on it (devices without classed
    pods may be absent)."""
    sgpu_qos_pending: Mapping[str, str] = field(default_factory=lambda: _NO_QOS, hash=False)
    """MetaX sGPU: device UUID → the QoS policy the pods held on it gave it that the node's
    ``QosPolicy`` report does not show yet (``""``: an exclusive placement cleared it); HAMi's
    just-assigned QoS cache, plus the devices this pod's earlier containers took."""


_NO_TASKS: Final[Mapping[str, SgpuTasks]] = MappingProxyType({})
_NO_QOS: Final[Mapping[str, str]] = MappingProxyType({})

NO_VENDOR_CONTEXT: Final = VendorContext()


@dataclass(frozen=True, slots=True)
class VendorPodFacts:
    """The pod's vendor annotations and the configuration defaults they fall back to."""

    ascend_vnpu_mode: str = ""
    """``huawei.com/vnpu-mode``."""
    ascend_hami_core_default: bool = False
    """The configuration's ``vnpus.hamiVnpuCore`` (a node's ``hami-vnpu-core`` overrides it)."""
    sgpu_qos: str = ""
    sgpu_app_class: str = ""
    sgpu_topology_aware: bool = False
    """``metax-tech.com/sgpu-topology-aware``, else the configuration's ``sgpuTopologyAware``."""


NO_POD_FACTS: Final = VendorPodFacts()


def _no_map() -> Mapping[int, float]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeVendorFacts:
    """The node's own vendor facts (annotations and profiles), fixed per registration."""

    ascend_hami_core: bool | None = None
    """Node annotation ``hami-vnpu-core`` (``None``: absent, the configuration decides)."""
    drs_profiles: tuple[DrsProfile, ...] = ()
    metax_losses: Mapping[int, float] = field(default_factory=_no_map, hash=False)
    """``metax-tech.com/gpu.topology.losses``: GPUs asked → loss of the best placement."""
    metax_scores: Mapping[int, float] = field(default_factory=_no_map, hash=False)
    """``metax-tech.com/gpu.topology.scores``."""


NO_NODE_FACTS: Final = NodeVendorFacts()


@dataclass(frozen=True, slots=True)
class SgpuNodeState:
    """MetaX sGPU devices of one node as the pods held there describe them."""

    tasks: Mapping[str, SgpuTasks] = field(default_factory=lambda: _NO_TASKS, hash=False)
    qos_pending: Mapping[str, str] = field(default_factory=lambda: _NO_QOS, hash=False)


NO_SGPU_STATE: Final = SgpuNodeState()

SgpuStateLookup = Callable[[str], SgpuNodeState]
"""Node name → its :class:`SgpuNodeState` (from the cache's holdings)."""


def _earlier_uuids(earlier: Sequence[ContainerDevices]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(device.uuid for container in earlier for device in container))


def vendor_context(
    word: str,
    pod: VendorPodFacts,
    node: NodeVendorFacts,
    *,
    node_name: str = "",
    earlier: Sequence[ContainerDevices] = (),
    sgpu_state: SgpuStateLookup | None = None,
) -> VendorContext:
    """The :class:`VendorContext` of vendor ``word`` for this pod on this node; ``earlier`` are
    the pod's devices of ``word`` its earlier containers were given in this decision."""
    hami_core = node.ascend_hami_core
    context = VendorContext(
        ascend_vnpu_mode=pod.ascend_vnpu_mode,
        ascend_node_hami_core=pod.ascend_hami_core_default if hami_core is None else hami_core,
        drs_profiles=node.drs_profiles,
        pod_uuids=_earlier_uuids(earlier),
        sgpu_qos=pod.sgpu_qos,
        sgpu_app_class=pod.sgpu_app_class,
        sgpu_topology_aware=pod.sgpu_topology_aware,
    )
    if word != METAX_SGPU:
        return context
    state = NO_SGPU_STATE if sgpu_state is None else sgpu_state(node_name)
    pending = dict(state.qos_pending)
    for container in earlier:
        for device in container:
            pending[device.uuid] = "" if device.usedcores >= _WHOLE else pod.sgpu_qos
    return VendorContext(
        ascend_vnpu_mode=context.ascend_vnpu_mode,
        ascend_node_hami_core=context.ascend_node_hami_core,
        drs_profiles=context.drs_profiles,
        pod_uuids=context.pod_uuids,
        sgpu_qos=context.sgpu_qos,
        sgpu_app_class=context.sgpu_app_class,
        sgpu_topology_aware=context.sgpu_topology_aware,
        sgpu_tasks=state.tasks,
        sgpu_qos_pending=MappingProxyType(pending) if pending else _NO_QOS,
    )
