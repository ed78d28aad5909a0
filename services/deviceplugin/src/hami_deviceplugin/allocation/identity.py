"""Pure: which pod an ``Allocate`` (or ``GetPreferredAllocation``) is for — the identity rule.

The kubelet names no pod in these calls, only device ids.  The question "which pod is this for"
must have exactly one answer that agrees with the device ids the kubelet chose, or the plugin
refuses (HAMi answers it with the node lock, and when the lock passes to another pod while the
kubelet is slow, two pods receive each other's limits: HAMi #3096).  Evidence, in this order:

1. **The kubelet's pod-resources listing** (``v1.PodResourcesLister/List``).  The kubelet adds a
   pod to its pod manager before admitting it, admits one pod at a time and records a
   container's devices right after the plugin's ``Allocate`` returns; ``List`` shows the active
   pods with the devices recorded so far (sidecars and app containers; ordinary init containers
   are not listed).  So the pod being admitted is the listed pod, Pending in the API, with a
   container that requests the resource and holds none of it yet (or, when only ordinary init
   containers request it, whose listed containers request none).  Exactly one such pod is the
   answer.  A listed pod the watch cache does not hold yet is read (:class:`Fetch`).
2. Otherwise (no listing, or it names no single pod): the **admissible pods** of the node as a
   LIST made during this call shows them (:class:`Relist`: a watch may lag behind the kubelet's
   and miss the pod being admitted) — Pending, not deleting, requesting the resource, and either
   placed by us with something left in this plugin's list (or the list unreadable) and not
   ``bind-phase: failed``, or not placed by us at all.  Exactly one is the answer; none, or more
   than one, is a refusal.  The node lock is **not** a tie-break: the kubelet admits in its own
   order, unrelated to who holds the lock, and GetPreferredAllocation, steered by the same
   guess, would make the kubelet's device ids confirm it — the very #3096 mix-up.  Within the
   lock protocol only one placed pod waits per node, so this costs nothing there.
3. A pod identified but **not placed by us** (no HAMi decision annotations: default-scheduler
   when the webhook failed open, a hand-set ``nodeName``) is refused in HAMi's words
   (``no binding pod found on node <n>``) with the reason.
4. The identified pod's next entries must name what the kubelet allocated (each plugin's
   :attr:`DeviceList.match`: for GPUs the replicas' GPUs, as a multiset); otherwise the plugin
   refuses (``the kubelet chose GPUs [...] but pod ns/x was given [...]``).  Device ids this
   process already answered for the same pod (an init container's, which the kubelet hands on
   to the next container) match anything.

Costs: rule 1 reads nothing from the API server when the watch holds the pod (one GET per listed
pod it lacks); rule 2 costs one LIST.  Every outcome is a frozen value; nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from hami_deviceplugin.allocation.entries import AllocatingContainer, AllocatingPod
from hami_deviceplugin.allocation.pending import device_lists
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import BIND_PHASE, BIND_PHASE_FAILED, BIND_TIME, VGPU_NODE
from hami_protocol.pod.devices import ContainerDevices, PodSingleDevice, pop_next_pending
from hami_protocol.request.quantity import as_integer, parse_quantity

__all__ = [
    "DeviceList",
    "Evidence",
    "Fetch",
    "Identified",
    "ListedContainer",
    "ListedPod",
    "Mismatch",
    "Outcome",
    "Refusal",
    "Relist",
    "check_entries",
    "find",
    "identify",
    "is_admissible",
    "next_entries",
    "placed_by_us",
    "requests_resource",
]

_DECISION_KEYS: Final = frozenset(
    {VGPU_NODE, BIND_PHASE, BIND_TIME, *(key for key, _ in device_lists())}
)
_SHOWN: Final = 5
"""Pods named at most in an ambiguity refusal."""


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedContainer:
    """One container as the kubelet's pod-resources ``List`` shows it."""

    name: str
    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(resource, device ids)`` the container holds."""

    def holds(self, resource: str) -> bool:
        return any(name == resource and ids for name, ids in self.devices)


@dataclass(frozen=True, slots=True)
class ListedPod:
    """One active pod of the kubelet's pod-resources ``List``."""

    namespace: str
    name: str
    containers: tuple[ListedContainer, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Mismatch:
    """What the kubelet's device ids name, and what the entry names instead."""

    chosen: tuple[str, ...]
    given: tuple[str, ...]


Matcher: TypeAlias = Callable[[ContainerDevices, Sequence[str], frozenset[str]], Mismatch | None]
"""``match(entry, kubelet ids, reused ids)``: None when the entry names what the ids name (ids in
``reused`` match anything); a count that differs is left to the plan ("device number not
matched")."""


@dataclass(frozen=True, slots=True)
class DeviceList:
    """What one plugin serves: its kubelet resource and its ``-devices-to-allocate`` list."""

    resource: str
    key: str
    noun: str
    """How refusals name the devices (``GPUs``, ``RDMA devices``)."""
    decode: Callable[[AllocatingPod], PodSingleDevice]
    """The pod's list, one entry per container; raises :class:`AllocateError`."""
    match: Matcher


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything one call knows."""

    node_name: str
    requests: tuple[tuple[str, ...], ...]
    """The kubelet's device ids, one tuple per container request (empty for a preference)."""
    pods: Mapping[str, AllocatingPod]
    """The pods bound to this node by ``namespace/name``: the watch cache, or a LIST."""
    fresh: bool = False
    """``pods`` come from a LIST made during this call."""
    listing: tuple[ListedPod, ...] | None = None
    """The kubelet's pod-resources ``List``; None when it could not be had."""
    gone: frozenset[str] = frozenset()
    """Listed pods the API server no longer has."""
    answered: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Device ids this process answered so far, by pod uid."""


# --- outcomes -----------------------------------------------------------------------------------

Via = Literal["pod-resources", "sole-admissible"]


@dataclass(frozen=True, slots=True)
class Identified:
    pod: AllocatingPod
    via: Via


@dataclass(frozen=True, slots=True)
class Refusal:
    message: str
    kind: FailureKind = FailureKind.NO_POD
    pod: AllocatingPod | None = None
    """The pod refused, when known (the Event goes there; the node otherwise)."""

    @property
    def placed(self) -> bool:
        """The refused pod carries our decision (so it is marked failed)."""
        return self.pod is not None and placed_by_us(self.pod)

    def error(self) -> AllocateError:
        return AllocateError(self.kind, self.message)


@dataclass(frozen=True, slots=True)
class Fetch:
    """Read these listed pods (``namespace/name``) the cache lacks, then ask again."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Relist:
    """Rule 2 needs the node's pods as a LIST shows them now; ask again with ``fresh``."""


Outcome: TypeAlias = Identified | Refusal | Fetch | Relist


# --- predicates ---------------------------------------------------------------------------------


def _asks(container: AllocatingContainer, resource: str) -> bool:
    """The container asks for a whole, positive number of ``resource``."""
    text = container.limit(resource)
    if text is None:
        return False
    try:
        value = as_integer(parse_quantity(text, key=resource))
    except ProtocolError:
        return False
    return value is not None and value > 0


def requests_resource(pod: AllocatingPod, resource: str) -> bool:
    """A container of ``pod`` asks for ``resource``."""
    return any(_asks(container, resource) for container in pod.containers)


def placed_by_us(pod: AllocatingPod) -> bool:
    """The pod carries a HAMi scheduling decision (vgpu-node, bind-phase, a device list)."""
    return any(key in pod.annotations for key in _DECISION_KEYS)


def _pending(pod: AllocatingPod) -> bool:
    return pod.phase in ("", "Pending") and not pod.deleting


def _left(pod: AllocatingPod, devices: DeviceList) -> bool | None:
    """Something is left in the pod's list for this plugin; None when the list is unreadable."""
    try:
        entries = devices.decode(pod)
    except AllocateError:
        return None
    return any(entries)


def is_admissible(pod: AllocatingPod, devices: DeviceList, node_name: str) -> bool:
    """Could the kubelet be admitting ``pod`` for ``devices`` right now (rule 2)?"""
    if pod.node_name != node_name or not _pending(pod):
        return False
    if not requests_resource(pod, devices.resource):
        return False
    if not placed_by_us(pod):
        return True
    if pod.annotations.get(BIND_PHASE) == BIND_PHASE_FAILED:
        return False
    return _left(pod, devices) is not False


def _being_admitted(pod: AllocatingPod, listed: ListedPod, resource: str) -> bool:
    # A pod the API shows running (or going) is past its admission, whatever it holds.
    if not _pending(pod):
        return False
    shown = {container.name: container for container in listed.containers}
    asking = [c for c in pod.containers if _asks(c, resource)]
    if any(c.name in shown and not shown[c.name].holds(resource) for c in asking):
        return True
    # Only ordinary init containers (never listed) ask for it: nothing shows their devices.
    return bool(asking) and all(c.name not in shown for c in asking)


# --- the rule -----------------------------------------------------------------------------------


def _names(pods: Sequence[AllocatingPod]) -> str:
    shown = ", ".join(pod.key for pod in pods[:_SHOWN])
    more = len(pods) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _from_listing(
    evidence: Evidence, devices: DeviceList, listing: tuple[ListedPod, ...]
) -> Outcome | None:
    missing = tuple(
        pod.key for pod in listing if pod.key not in evidence.pods and pod.key not in evidence.gone
    )
    if missing:
        return Fetch(missing)
    candidates = [
        evidence.pods[pod.key]
        for pod in listing
        if pod.key in evidence.pods
        and _being_admitted(evidence.pods[pod.key], pod, devices.resource)
    ]
    if len(candidates) == 1:
        return Identified(candidates[0], "pod-resources")
    return None


def find(evidence: Evidence, devices: DeviceList) -> Outcome:
    """The pod being admitted, by rules 1 and 2 (not yet checked against the kubelet's ids)."""
    if evidence.listing is not None:
        found = _from_listing(evidence, devices, evidence.listing)
        if found is not None:
            return _placed(found, evidence.node_name)
    if not evidence.fresh:
        return Relist()
    admissible = sorted(
        (pod for pod in evidence.pods.values() if is_admissible(pod, devices, evidence.node_name)),
        key=lambda pod: pod.key,
    )
    node = evidence.node_name
    if not admissible:
        return Refusal(
            f"no binding pod found on node {node}: no pod bound to it waits for {devices.noun}"
        )
    if len(admissible) > 1:
        return Refusal(
            f"no binding pod found on node {node}: {len(admissible)} pods bound to it wait for "
            f"{devices.noun} ({_names(admissible)}) and, without the kubelet's pod-resources "
            "API, nothing tells which one the kubelet is admitting"
        )
    return _placed(Identified(admissible[0], "sole-admissible"), node)


def _placed(outcome: Outcome, node_name: str) -> Outcome:
    if not isinstance(outcome, Identified) or placed_by_us(outcome.pod):
        return outcome
    pod = outcome.pod
    scheduler = pod.scheduler_name or "default-scheduler"
    return Refusal(
        f"no binding pod found on node {node_name}: pod {pod.key} was not placed by "
        f"hami-scheduler (schedulerName {scheduler}): it has no device decision",
        pod=pod,
    )


def next_entries(
    pod: AllocatingPod, devices: DeviceList, count: int
) -> tuple[ContainerDevices, ...]:
    """The pod's next ``count`` entries that hold devices (fewer when fewer are left); raises
    :class:`AllocateError` when the list cannot be read."""
    current = devices.decode(pod)
    found: list[ContainerDevices] = []
    for _ in range(count):
        popped = pop_next_pending(current)
        if popped is None:
            break
        _, entry, current = popped
        found.append(entry)
    return tuple(found)


def check_entries(
    pod: AllocatingPod,
    devices: DeviceList,
    requests: Sequence[Sequence[str]],
    answered: Mapping[str, frozenset[str]],
) -> Refusal | None:
    """Refuse when the pod's next entries name other devices than the kubelet's ids.

    An unreadable list or a missing entry is left to the plan, which says what is wrong.
    """
    try:
        entries = next_entries(pod, devices, len(requests))
    except AllocateError:
        return None
    reused = answered.get(pod.uid, frozenset())
    for entry, ids in zip(entries, requests, strict=False):
        mismatch = devices.match(entry, ids, reused)
        if mismatch is not None:
            return Refusal(
                f"the kubelet chose {devices.noun} [{', '.join(mismatch.chosen)}] but pod "
                f"{pod.key} was given [{', '.join(mismatch.given)}]",
                kind=FailureKind.INVALID,
                pod=pod,
            )
    return None


def identify(evidence: Evidence, devices: DeviceList) -> Outcome:
    """:func:`find`, then :func:`check_entries` against the kubelet's ids."""
    found = find(evidence, devices)
    if not isinstance(found, Identified):
        return found
    refused = check_entries(found.pod, devices, evidence.requests, evidence.answered)
    return found if refused is None else refused
