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

__all__ = ["NO_VENDOR_CONTEXT", "DrsProfile", "SgpuTasks", "VendorContext"]


@dataclass(frozen=True, slots=True)
class DrsProfile:
    """One Enflame DRS profile of the node (``"<slices>g.<GB>gb": "<profileID>"``)."""

    name: str
    profile_id: str
    slices: int
    memory_gb: int


@dataclass(frozen=True, slots=True)
class SgpuTasks:
    """What the pods on one MetaX sGPU device run there (from the node's pods' annotations)."""

    qos: str = ""
    """The QoS policy of the tasks on it (``metax-tech.com/sgpu-qos-policy``); ``""`` if none."""
    online: int = 0
    """Tasks of ``online``-class pods (``metax-tech.com/sgpu-app-class``)."""
    offline: int = 0
    """Tasks of ``offline``-class pods."""
    unclassed: int = 0
    """Tasks of pods without an app class."""


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
    """MetaX sGPU: device UUID → what runs there now, including the QoS just assigned to pods
    the node report does not show yet."""


_NO_TASKS: Final[Mapping[str, SgpuTasks]] = MappingProxyType({})

NO_VENDOR_CONTEXT: Final = VendorContext()
