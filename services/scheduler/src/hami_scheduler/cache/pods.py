"""What a Pod object holds on its node, read from the annotations the scheduler wrote.

A placed pod carries ``hami.io/vgpu-node`` and, per vendor, ``hami.io/<x>-devices-allocated``
(never modified after the filter).  :func:`read_pod` decodes those into a :class:`Holding`: the
node, the per-container device lists and their collapsed per-device usage — init containers
count by their peak against the sum of the app containers, and once every init container has
exited 0 only the app containers count (HAMi's rule).  Pods in phase ``Succeeded``/``Failed``
hold nothing.  A device list that cannot be decoded holds nothing and is reported in
``problems`` (the caller logs it once).

:class:`PodNicAllocation` is a pod's NIC allocation and exclusive PCIe claims as written on it
(``hami.io/rdma-devices-allocated``, ``scheduling.koordinator.sh/device-allocated`` and
``…/device-allocate-hint``, plus the GPUs it holds): kept as written, because what they hold
depends on the node's NIC layout, which may change or arrive after the pod
(:mod:`hami_scheduler.cache.nics` resolves it).  Only pods carrying one of those annotations
have one.

:func:`allocation_key` names an allocation by its written values, so the cache can recognise
the pod update that carries a decision it assumed.  :func:`slim_pod` strips a watched pod down
to the fields the cache reads, so a cluster's pods do not sit in memory in full.

Memory matters here (a cluster may run 100,000 placed pods): a :class:`Holding` keeps the
written annotation values by reference (the very strings the slimmed pod holds) rather than
decoded device lists — :meth:`Holding.pod_devices` decodes them on demand, for metrics — and
the strings every pod repeats (device UUIDs, vendor words, namespaces, node names, phases) are
interned, so 100,000 pods on 40,000 GPUs share 40,000 UUID strings.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kube.timefmt import parse_time
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.pod.devices import (
    DeviceUsageSummary,
    PodDevices,
    PodSingleDevice,
    decode_pod_devices_canonical,
)
from hami_protocol.pod.mig import (
    MigReservation,
    decode_mig_reservations,
    encode_mig_reservations,
)
from hami_protocol.topology.koordinator import decode_device_allocated
from hami_protocol.vendor.table import METAX_SGPU, Vendor
from hami_scheduler.core import pod_usage
from hami_scheduler.core.mig import MigHold, mig_holds

__all__ = [
    "MIG_KEY_WORD",
    "NIC_ANNOTATIONS",
    "NIC_KEY_WORD",
    "AllocationKey",
    "Holding",
    "PodFacts",
    "PodNicAllocation",
    "allocation_key",
    "carries_allocation",
    "mig_key_value",
    "pod_nic_allocation",
    "read_pod",
    "slim_pod",
]

NIC_ANNOTATIONS: Final = (
    keys.RDMA_DEVICES_ALLOCATED,
    keys.KOORD_DEVICE_ALLOCATED,
    keys.KOORD_DEVICE_ALLOCATE_HINT,
)
"""The pod annotations its NICs and exclusive PCIe claims are read from."""
NIC_KEY_WORD: Final = "RDMA"
"""Stands for ``hami.io/rdma-devices-allocated`` in an :data:`AllocationKey`."""
MIG_KEY_WORD: Final = "MIG"
"""Stands for the pod's MIG reservations in an :data:`AllocationKey`, written without the
runtime ids: the device plugin adds those later, and the allocation stays the same one."""

AllocationKey = tuple[str, ...]
"""``(node, vendor word, written device list, vendor word, ...)``, vendors sorted (the RDMA
list under :data:`NIC_KEY_WORD`); one flat tuple, as there is one per placed pod."""


def carries_allocation(obj: Mapping[str, Any], allocation: frozenset[str]) -> bool:
    """Whether a pod carries one of the ``allocation`` annotations
    (:func:`~hami_protocol.pod.allocation.allocation_keys`).

    The pod watch keeps only such pods: every bound pod is listed, but memory holds the few
    placed by us or by an older HAMi (which wrote no ``hami.io/vgpu-node`` label).
    """
    return not allocation.isdisjoint(PodView(obj).annotations)


@dataclass(frozen=True, slots=True)
class PodNicAllocation:
    """A pod's NIC allocation and exclusive claims as written on it, before a node's NIC layout
    resolves them into units, VFs and scopes."""

    annotations: tuple[tuple[str, str], ...]
    """The pod's :data:`NIC_ANNOTATIONS` that are present (and decode), in that order."""
    init_count: int
    init_finished: bool = False
    gpu_uuids: tuple[str, ...] = ()
    """The GPUs the pod holds, sorted (their PCIe scopes are what a gpu claim covers)."""

    @property
    def rdma_list(self) -> str | None:
        """``hami.io/rdma-devices-allocated`` (part of the :data:`AllocationKey`)."""
        return dict(self.annotations).get(keys.RDMA_DEVICES_ALLOCATED)


def pod_nic_allocation(
    annotations: Mapping[str, str],
    *,
    init_count: int,
    init_finished: bool = False,
    gpu_uuids: Sequence[str] = (),
) -> PodNicAllocation | None:
    """The :class:`PodNicAllocation` of a pod with these annotations; ``None`` when it carries
    none of :data:`NIC_ANNOTATIONS`."""
    # A blank value (a stale list the Binding cleared) holds nothing.
    present = tuple((k, annotations[k]) for k in NIC_ANNOTATIONS if annotations.get(k))
    if not present:
        return None
    intern = sys.intern
    return PodNicAllocation(
        annotations=present,
        init_count=init_count,
        init_finished=init_finished,
        gpu_uuids=tuple(sorted({intern(uuid) for uuid in gpu_uuids})),
    )


def allocation_key(node: str, lists: Mapping[str, str]) -> AllocationKey:
    """Names an allocation: the node and every vendor's written device list."""
    flat = [node]
    for word in sorted(lists):
        flat += (word, lists[word])
    return tuple(flat)


@dataclass(frozen=True, slots=True)
class Holding:
    """What one placed pod holds: its node, collapsed per-device usage and written lists."""

    node: str
    namespace: str
    usage: tuple[DeviceUsageSummary, ...]
    key: AllocationKey
    """:func:`allocation_key` of the written values (which it holds by reference)."""
    nics: PodNicAllocation | None = None
    """Its NICs and exclusive claims as written; ``None``: it has neither."""
    mig: tuple[MigHold, ...] = ()
    """The MIG slices its reservations hold (``hami.io/vgpu-mig-allocations``)."""
    reservations: tuple[MigReservation, ...] = ()
    """Those reservations as written, runtime ids included once the plugin has added them."""
    sgpu_class: str = ""
    """MetaX sGPU pods only: ``metax-tech.com/sgpu-app-class`` (``online``/``offline``/``""``)."""
    sgpu_qos: str = ""
    """MetaX sGPU pods only: ``metax-tech.com/sgpu-qos-policy``."""

    def pod_devices(self) -> PodDevices:
        """The written GPU device lists, decoded (undecodable ones left out)."""
        decoded: dict[str, PodSingleDevice] = {}
        for position in range(1, len(self.key) - 1, 2):
            word, value = self.key[position], self.key[position + 1]
            if word in (NIC_KEY_WORD, MIG_KEY_WORD):
                continue
            try:
                decoded[word] = decode_pod_devices_canonical(value)
            except (ProtocolError, ValueError, RecursionError):
                continue
        return PodDevices.from_mapping(decoded)


@dataclass(frozen=True, slots=True)
class PodFacts:
    uid: str
    namespace: str
    name: str
    holding: Holding | None
    terminal: bool = False
    """Phase ``Succeeded`` or ``Failed``: the pod holds nothing, whatever it was assumed to."""
    problems: tuple[str, ...] = ()
    priority: int = 0
    """``spec.priority`` (0 when unset, as kube-scheduler reads it): the preempt verb's rank."""
    started: float | None = None
    """``status.startTime`` in Unix seconds (``None``: not started, or unreadable)."""
    terminating: bool = False
    """``metadata.deletionTimestamp`` is set: the pod still holds its devices until it is gone,
    but what it holds is on its way out (a nominated preemptor is placed as if it were)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The pod's labels (PodDisruptionBudgets select by them)."""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _init_terminations(pod: PodView) -> list[Mapping[str, Any]]:
    """``state.terminated`` of each init container status (``{}`` while it has not ended)."""
    return [
        _mapping(_mapping(one.get("state")).get("terminated"))
        for one in pod.init_container_statuses
    ]


def _init_finished(pod: PodView, count: int) -> bool:
    terminations = _init_terminations(pod)
    if count == 0 or len(terminations) < count:
        return False
    return all(terminated.get("exitCode") == 0 for terminated in terminations)


def shared_usage(usage: Sequence[DeviceUsageSummary]) -> tuple[DeviceUsageSummary, ...]:
    """``usage`` with its UUID and vendor strings interned (shared by every pod)."""
    intern = sys.intern
    return tuple(
        DeviceUsageSummary(intern(s.uuid), intern(s.type), s.usedmem, s.usedcores, s.slots)
        for s in usage
    )


def start_time(pod: PodView) -> float | None:
    """``status.startTime`` in Unix seconds; ``None`` when unset or not a time."""
    text = pod.status.get("startTime")
    if not isinstance(text, str):
        return None
    try:
        return parse_time(text).timestamp()
    except ValueError:
        return None


def read_pod(obj: Mapping[str, Any], vendors: Sequence[Vendor]) -> PodFacts:
    """What ``obj`` holds; never raises on bad input."""
    pod = PodView(obj)
    uid, namespace, name = pod.uid, sys.intern(pod.namespace), pod.name
    annotations = pod.annotations
    node = annotations.get(keys.VGPU_NODE, "")
    if pod.terminal:
        return PodFacts(uid, namespace, name, None, terminal=True)
    priority, started = pod.priority, start_time(pod)
    terminating, labels = pod.deleting, pod.labels
    if not node:
        return PodFacts(
            uid,
            namespace,
            name,
            None,
            priority=priority,
            started=started,
            terminating=terminating,
            labels=labels,
        )
    written: dict[str, str] = {}
    decoded: dict[str, PodSingleDevice] = {}
    problems: list[str] = []
    for vendor in vendors:
        key = vendor.devices_allocated_key
        raw = "" if key is None else annotations.get(key, "")
        if key is None or not raw:  # absent, or a stale list the Binding blanked
            continue
        written[vendor.common_word] = raw
        try:
            decoded[vendor.common_word] = decode_pod_devices_canonical(raw, key=key)
        except (ProtocolError, ValueError, RecursionError) as exc:
            problems.append(str(exc))
    devices = PodDevices.from_mapping(decoded)
    init_count = len(pod.init_containers)
    init_finished = _init_finished(pod, init_count)
    usage = pod_usage(devices, init_count=init_count, init_finished=init_finished)
    nics = _nic_allocation(annotations, devices, init_count, init_finished, problems)
    listed = None if nics is None else nics.rdma_list
    if listed is not None:
        written[NIC_KEY_WORD] = listed
    reservations = _reservations(annotations, problems)
    if reservations:
        written[MIG_KEY_WORD] = mig_key_value(reservations)
    node = sys.intern(node)
    sgpu = METAX_SGPU in decoded
    holding = Holding(
        node,
        namespace,
        shared_usage(usage),
        allocation_key(node, written),
        nics,
        mig=mig_holds(f"{namespace}/{name}", reservations),
        reservations=reservations,
        sgpu_class=sys.intern(annotations.get(keys.METAX_SGPU_APP_CLASS, "")) if sgpu else "",
        sgpu_qos=sys.intern(annotations.get(keys.METAX_SGPU_QOS_POLICY, "")) if sgpu else "",
    )
    return PodFacts(
        uid,
        namespace,
        name,
        holding,
        problems=tuple(problems),
        priority=priority,
        started=started,
        terminating=terminating,
        labels=labels,
    )


def mig_key_value(reservations: Sequence[MigReservation]) -> str:
    """The reservations as the :data:`AllocationKey` names them: without runtime ids."""
    return encode_mig_reservations(replace(r, runtime=None) for r in reservations)


def _reservations(
    annotations: Mapping[str, str], problems: list[str]
) -> tuple[MigReservation, ...]:
    """The pod's MIG reservations; a value that does not decode holds no slices and is reported
    (the slots it uses then exceed the GPU's reservations, so the GPU takes no new instance)."""
    raw = annotations.get(keys.NVIDIA_MIG_ALLOCATIONS)
    if not raw:
        return ()
    try:
        return tuple(decode_mig_reservations(raw))
    except (ProtocolError, ValueError, RecursionError) as exc:
        problems.append(str(exc))
        return ()


def _nic_allocation(
    annotations: Mapping[str, str],
    devices: PodDevices,
    init_count: int,
    init_finished: bool,
    problems: list[str],
) -> PodNicAllocation | None:
    """The pod's :class:`PodNicAllocation`; a written list that does not decode is left out of
    it and reported in ``problems`` (it then holds nothing, as a bad GPU list does)."""
    if not any(annotations.get(key) for key in NIC_ANNOTATIONS):
        return None
    kept = dict(annotations)
    for key in (keys.RDMA_DEVICES_ALLOCATED, keys.KOORD_DEVICE_ALLOCATED):
        if not kept.get(key):
            continue
        try:
            if key == keys.RDMA_DEVICES_ALLOCATED:
                decode_pod_devices_canonical(kept[key], key=key)
            else:
                decode_device_allocated(kept[key])
        except (ProtocolError, ValueError, RecursionError) as exc:
            problems.append(str(exc))
            del kept[key]
    uuids = [device.uuid for _, pod in devices.entries for ctr in pod for device in ctr]
    return pod_nic_allocation(
        kept, init_count=init_count, init_finished=init_finished, gpu_uuids=uuids
    )


_KEPT_META: Final = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
_KEPT_STATE: Final = (keys.BIND_PHASE, keys.BIND_TIME, keys.CAMBRICON_DSMLU_ASSIGNED)
"""Read when the pod owns a node lock (:mod:`hami_scheduler.nodelock.owners`), not by the cache."""


def _interned(value: object) -> object:
    return sys.intern(value) if isinstance(value, str) else value


def slim_pod(obj: dict[str, Any], vendors: Sequence[Vendor]) -> None:
    """Drop, in place, everything of a watched pod that :func:`read_pod` does not read.

    The reflector keeps each watched object; without this a large cluster's pods (specs, env,
    volumes, managed fields, labels) would take gigabytes.  What stays: name, namespace, uid,
    resourceVersion, the labels (PodDisruptionBudgets select by them), ``hami.io/vgpu-node`` and
    the ``-devices-allocated`` annotations, the init
    containers (as empty entries, for their count), a terminal phase and the init containers'
    exit codes, what the preempt verb ranks victims by (``spec.priority``,
    ``status.startTime``), a ``DisruptionTarget`` condition (the preemption Events), and what
    the node lock's takeover rule reads of a lock owner
    (``spec.nodeName``, ``metadata.deletionTimestamp``, ``hami.io/bind-phase``,
    ``hami.io/bind-time`` and Cambricon's ``CAMBRICON_DSMLU_ASSIGNED``) —
    ``spec`` and ``status`` are left out entirely when they hold none of these.
    """
    pod = PodView(obj)
    meta, annotations = pod.meta, pod.annotations
    wanted = [
        keys.VGPU_NODE,
        keys.NVIDIA_MIG_ALLOCATIONS,
        keys.METAX_SGPU_APP_CLASS,
        keys.METAX_SGPU_QOS_POLICY,
        *NIC_ANNOTATIONS,
        *_KEPT_STATE,
    ]
    wanted += [v.devices_allocated_key for v in vendors if v.devices_allocated_key]
    slim_meta: dict[str, Any] = {k: meta[k] for k in _KEPT_META if k in meta}
    if "namespace" in slim_meta:
        slim_meta["namespace"] = _interned(slim_meta["namespace"])
    # Keys from our constants (interned), not the decoded document's own copies.
    kept = {k: annotations[k] for k in wanted if k in annotations}
    for shared in (keys.VGPU_NODE, keys.BIND_PHASE):
        if shared in kept:
            kept[shared] = sys.intern(kept[shared])
    if kept:
        slim_meta["annotations"] = kept
    labels = meta.get("labels")
    if isinstance(labels, dict) and labels:
        # PodDisruptionBudgets select victims by them (the preempt verb); interned, as most
        # pods repeat their workload's few labels.
        slim_meta["labels"] = {
            sys.intern(k): sys.intern(v)
            for k, v in labels.items()
            if isinstance(k, str) and isinstance(v, str)
        }
    inits = len(pod.init_containers)
    init_statuses = [
        {"state": {"terminated": {"exitCode": terminated.get("exitCode")}} if terminated else {}}
        for terminated in _init_terminations(pod)
    ]
    # kube-scheduler marks its victims so before deleting them (the preemption Events read it).
    disruption = [c for c in pod.conditions if c.get("type") == "DisruptionTarget"]
    terminal, phase, node = pod.terminal, pod.phase, pod.node_name
    priority, started = pod.spec.get("priority"), pod.status.get("startTime")
    obj.clear()
    obj["metadata"] = slim_meta
    slim_spec: dict[str, Any] = {}
    if node:
        slim_spec["nodeName"] = sys.intern(node)
    if inits:
        slim_spec["initContainers"] = [{} for _ in range(inits)]
    if isinstance(priority, int) and priority:
        slim_spec["priority"] = priority
    if slim_spec:
        obj["spec"] = slim_spec
    slim_status: dict[str, Any] = {}
    if terminal:
        slim_status["phase"] = sys.intern(phase)
    if init_statuses:
        slim_status["initContainerStatuses"] = init_statuses
    if isinstance(started, str):
        slim_status["startTime"] = started
    if disruption:
        slim_status["conditions"] = [dict(c) for c in disruption]
    if slim_status:
        obj["status"] = slim_status
