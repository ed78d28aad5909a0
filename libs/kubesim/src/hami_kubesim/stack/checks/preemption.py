"""What must hold of every preemption the scheduling loop carried out (issue 24), judged from its
records (:attr:`~hami_kubesim.stack.state.ClusterState.preemptions`: the preemptor, the node,
the victims and the node's pods as they were then) and, for the hold, the timeline.

* :func:`priority_problems` — no victim of priority at or above its preemptor's.
* :func:`needless_victims` — no victim whose release the preemptor did not need: with that
  victim kept and every other victim gone, the preemptor must not fit on the node's devices as
  the node's pods held them at preemption time. Judged with a plain per-card fit (free memory,
  free cores, a free task slot, an exclusive holder or an exclusive request) that counts
  terminating pods as holding, as they do until they are gone. Only what that fit can judge
  is judged, and the rest skipped: a preemptor of one container asking for NVIDIA slices alone
  (``nvidia.com/gpu`` with ``gpumem`` or ``gpumem-percentage`` and ``gpucores``), without a
  type, UUID or NUMA selector; a node whose register is readable and has no MIG-mode device;
  no other pod of at least the preemptor's priority nominated to the node (the room it waits
  for is not the preemptor's); every pod of the node with its allocation written; and victims
  that hold devices there (one holding none was needed by kube-scheduler's in-tree filters,
  which this does not replay).
* :func:`hold_problems` — held slices never given to a lower-priority pod. While a preemptor
  ``P`` is nominated to node ``N`` (from its preemption until it is bound, gone, being deleted
  or its nomination moves), a pod of lower priority bound to ``N`` in that window must not
  take what ``P`` waits for: it must never become a victim of a later preemption by ``P``,
  and ``P`` must not be left waiting, unbound and not deleted, when everything settled. Needs
  the timeline (skipped without one).

Pure: ``(subject, message)`` pairs; :mod:`.invariants` turns them into violations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kubesim.scheduler.preemption.record import PreemptionRecord
from hami_kubesim.stack.state import (
    ClusterState,
    DeviceLoad,
    Timeline,
    allocated_devices,
    device_loads,
    node_devices,
)
from hami_protocol import keys

__all__ = ["SliceRequest", "hold_problems", "needless_victims", "priority_problems"]

Problem = tuple[str, str]

_GPU: Final = "nvidia.com/gpu"
_MEMORY: Final = "nvidia.com/gpumem"
_PERCENT: Final = "nvidia.com/gpumem-percentage"
_CORES: Final = "nvidia.com/gpucores"
_SELECTORS: Final = (
    keys.NVIDIA_USE_GPUTYPE,
    keys.NVIDIA_NOUSE_GPUTYPE,
    keys.NVIDIA_USE_GPUUUID,
    keys.NVIDIA_NOUSE_GPUUUID,
    keys.NVIDIA_NUMA_BIND,
)
_MIG_MODE: Final = "mig"


def priority_problems(state: ClusterState) -> list[Problem]:
    found: list[Problem] = []
    for record in state.preemptions:
        for victim in map(PodView, record.victims):
            if victim.priority >= record.priority:
                found.append(
                    (
                        victim.key,
                        f"preempted by {record.preemptor_key} (priority {record.priority}) on "
                        f"{record.node} with priority {victim.priority}",
                    )
                )
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class SliceRequest:
    """A plain NVIDIA slice request: ``count`` cards, each with ``memory`` MiB (or ``percent``
    of its memory when ``memory`` is 0) and ``cores`` percent."""

    count: int
    memory: int = 0
    percent: int = 100
    cores: int = 0

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> SliceRequest | None:
        """The request of ``pod``, or ``None`` when the plain fit cannot judge it."""
        view = PodView(pod)
        if view.init_containers or len(view.containers) != 1:
            return None
        if any(view.annotations.get(key) for key in _SELECTORS):
            return None
        limits = view.containers[0].limits
        wanted = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
        if not set(wanted) <= {_GPU, _MEMORY, _PERCENT, _CORES}:
            return None
        try:
            numbers = {k: int(v) for k, v in wanted.items()}
        except (TypeError, ValueError):
            return None
        count = numbers.get(_GPU, 0)
        if count <= 0:
            return None
        return cls(
            count=count,
            memory=numbers.get(_MEMORY, 0),
            percent=numbers.get(_PERCENT, 100),
            cores=numbers.get(_CORES, 0),
        )

    def fits_card(self, load: DeviceLoad) -> bool:
        device = load.device
        memory = self.memory or device.devmem * self.percent // 100
        if not device.health or load.exclusive_holders:
            return False
        if self.cores >= device.devcore and load.holders:
            return False  # an exclusive request wants the card alone
        return (
            load.slots < device.count
            and load.memory + memory <= device.devmem
            and load.cores + self.cores <= device.devcore
        )

    def fits(self, loads: Mapping[str, DeviceLoad]) -> bool:
        return sum(self.fits_card(load) for load in loads.values()) >= self.count


def _on_node(pod: Mapping[str, Any], node: str) -> Mapping[str, Any]:
    """``pod`` bound to ``node`` (an assumed pod's binding may not be written yet)."""
    if PodView(pod).node_name:
        return pod
    spec = pod.get("spec")
    return {**pod, "spec": {**(spec if isinstance(spec, Mapping) else {}), "nodeName": node}}


def _judgeable(record: PreemptionRecord) -> tuple[SliceRequest, Mapping[str, Any]] | None:
    """The preemptor's request and the node, when the plain fit can judge the record."""
    request, node = SliceRequest.of(record.preemptor), record.node_object
    if request is None or record.nominated or node is None:
        return None
    devices = node_devices(node)
    if not devices or any(d.mode == _MIG_MODE for d in devices):
        return None
    for pod in record.on_node:
        asks = any(_GPU in c.limits for c in PodView(pod).all_containers())
        if asks and allocated_devices(pod) is None:
            return None  # its usage is not known here
    return request, node


def _loads(
    record: PreemptionRecord, node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
) -> Mapping[str, DeviceLoad]:
    """Per device of ``node``, what ``pods`` hold (as the invariant ``devices`` sums it)."""
    snapshot = ClusterState(
        pods=tuple(_on_node(p, record.node) for p in pods),
        nodes=(node,),
        events=(),
        taken_at=record.at,
    )
    return device_loads(snapshot).get(record.node, {})


def needless_victims(state: ClusterState) -> list[Problem]:
    found: list[Problem] = []
    for record in state.preemptions:
        judged = _judgeable(record)
        if judged is None:
            continue
        request, node = judged
        victims = {PodView(v).uid for v in record.victims}
        others = [
            p
            for p in record.on_node
            if PodView(p).uid not in victims and PodView(p).uid != record.preemptor_uid
        ]
        for victim in record.victims:
            if not allocated_devices(victim):
                continue
            if request.fits(_loads(record, node, [*others, victim])):
                found.append(
                    (
                        PodView(victim).key,
                        f"preempted by {record.preemptor_key} on {record.node} without need: "
                        f"it fits there with this victim kept ({request})",
                    )
                )
    return found


def _window(timeline: Timeline, record: PreemptionRecord, until: datetime) -> datetime:
    """When ``record``'s preemptor stopped being nominated to its node: bound, gone, being
    deleted, or nominated elsewhere after its nomination there was written (``until`` if
    never)."""
    written = False
    for moment in timeline.pods:
        if moment.at < record.at or moment.key != record.preemptor_key:
            continue
        if not moment.exists or moment.node or moment.deleting:
            return moment.at
        if moment.nominated == record.node:
            written = True
        elif written:
            return moment.at
    return until


def _bound_during(
    timeline: Timeline, node: str, start: datetime, end: datetime
) -> Iterator[tuple[str, int]]:
    """``(pod key, priority)`` of each pod bound to ``node`` in ``(start, end]``."""
    last: dict[str, str] = {}
    for moment in timeline.pods:
        was = last.get(moment.key, "")
        last[moment.key] = moment.node if moment.exists else ""
        if start < moment.at <= end and moment.node == node and was != node:
            yield moment.key, moment.priority


def hold_problems(state: ClusterState) -> list[Problem]:
    timeline = state.timeline
    if timeline is None:
        return []
    found: list[Problem] = []
    waiting: set[str] = set()
    by_uid: dict[str, list[PreemptionRecord]] = {}
    for record in state.preemptions:
        by_uid.setdefault(record.preemptor_uid, []).append(record)
    for records in by_uid.values():
        for index, record in enumerate(records):
            end = _window(timeline, record, state.taken_at)
            lower = {
                key: priority
                for key, priority in _bound_during(timeline, record.node, record.at, end)
                if key != record.preemptor_key and priority < record.priority
            }
            if not lower:
                continue
            subject = record.preemptor_key
            later = {PodView(v).key for r in records[index + 1 :] for v in r.victims}
            found += [
                (
                    subject,
                    f"{key} (priority {lower[key]}) was bound to {record.node} while "
                    f"{subject} (priority {record.priority}) was nominated there, and "
                    f"{subject} then preempted it",
                )
                for key in sorted(lower.keys() & later)
            ]
            final = state.pod(*subject.split("/", 1))
            view = PodView(final or {})
            if subject in waiting or final is None or view.node_name or view.deleting:
                continue
            waiting.add(subject)
            names = ", ".join(sorted(lower))
            found.append(
                (
                    subject,
                    f"still waits (unbound) after lower-priority {names} were bound to "
                    f"{record.node} while it was nominated there",
                )
            )
    return found
