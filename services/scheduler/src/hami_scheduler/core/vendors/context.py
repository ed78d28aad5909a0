"""What vendor fits need to know about the pod and the node beyond the devices and request.

:class:`VendorContext` rides in :attr:`FitContext.vendor <hami_scheduler.core.fit.FitContext>`;
its defaults describe a pod and node with no vendor facts, so the NVIDIA path never builds one.
Whoever builds the :class:`~hami_scheduler.core.fit.FitContext` for a vendor fills the fields
that vendor's module reads (each field says who reads it and where it comes from).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

__all__ = ["NO_SGPU_TASKS", "NO_VENDOR_CONTEXT", "DrsProfile", "SgpuTasks", "VendorContext"]


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
    """MetaX sGPU: device UUID → the QoS policy a recent placement gave it that the node's
    ``QosPolicy`` report does not show yet (``""``: an exclusive placement cleared it); HAMi's
    just-assigned QoS cache, plus the devices this pod's earlier containers took."""


_NO_TASKS: Final[Mapping[str, SgpuTasks]] = MappingProxyType({})
_NO_QOS: Final[Mapping[str, str]] = MappingProxyType({})

NO_VENDOR_CONTEXT: Final = VendorContext()
