"""Which RDMA NICs, and which of their VFs, each container of one pod gets on one node.

Every NIC is checked in this order; the first failing check is what the NIC counts as:

1. unhealthy → ``NicNotHealthy``
2. the rdma hint's ``selector`` does not match its labels → ``NicSelectorMismatch``
3. another pod holds an exclusive (``PCIeLevel``) RDMA claim on its scope → ``NicPcieClaimed``
4. the pod is ``PCIeLevel`` exclusive and another pod holds something on a NIC of that scope
   → ``NicPcieBusy``
5. a VF is required and no VF group matches ``vfSelector`` → ``NicVfSelectorMismatch``
6. fewer free units than the per-NIC demand → ``NicInsufficientUnits``
7. a VF is required and every matching VF is taken → ``NicNoFreeVf``

A failing container reports ``Insufficient rdma devices: <n>/<NICs> <Reason>, ...``.

**Order.** Without preferred scopes NICs are tried by minor (Koordinator's Filter order).  With
preferred scopes — the PCIe switches of the pod's GPUs under joint allocation — the order is
Koordinator's ``sortDeviceResourcesByPreferredPCIe``: round robin over the preferred scopes (the
best NIC of each, then the second of each, every round sorted by score then minor), then the other
NICs (:func:`order_preferred`).

**How many.** A container asking ``count`` NICs with preferred scopes first takes one NIC in each
preferred scope that has a usable one ("one NIC per GPU switch", even for ``rdma: 1``), then more
in order until it holds ``count``.  NICs outside the preferred scopes only ever make up ``count``
(Koordinator may also use them to reach one per GPU switch; a far NIC adds nothing there).
Under ``SamePCIe`` only preferred scopes are used, and each of them must get a NIC.

**VFs.** On a NIC, the VFs of the groups matching ``vfSelector`` are tried lowest bus id first;
the first that no pod holds and this pod has not been given wins.  When the pod designates VFs and
the NIC owns one of them, only those are tried.  A container gets at most one VF per NIC; two
containers of one pod get different VFs.

**Containers.** Init containers see the node's own usage (they run one at a time); app containers
share one running copy, each seeing the units the previous ones took.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from hami_protocol import keys
from hami_protocol.request.containers import PodDeviceRequests
from hami_protocol.topology.layout import VirtualFunction, vfs_matching
from hami_scheduler.core import reasons as why
from hami_scheduler.core.joint.hints import JointRequest, NicDemand
from hami_scheduler.core.joint.nics import NicUsage

__all__ = [
    "INSUFFICIENT_RDMA",
    "INSUFFICIENT_VFS",
    "NIC_INSUFFICIENT_UNITS",
    "NIC_NOT_HEALTHY",
    "NIC_NO_FREE_VF",
    "NIC_PCIE_BUSY",
    "NIC_PCIE_CLAIMED",
    "NIC_SELECTOR_MISMATCH",
    "NIC_VF_SELECTOR_MISMATCH",
    "NicGrant",
    "NicPlanner",
    "PodNics",
    "nic_planner",
    "order_preferred",
    "place_pod_nics",
]

NIC_NOT_HEALTHY: Final = "NicNotHealthy"
NIC_SELECTOR_MISMATCH: Final = "NicSelectorMismatch"
NIC_PCIE_CLAIMED: Final = "NicPcieClaimed"
NIC_PCIE_BUSY: Final = "NicPcieBusy"
NIC_VF_SELECTOR_MISMATCH: Final = "NicVfSelectorMismatch"
NIC_INSUFFICIENT_UNITS: Final = "NicInsufficientUnits"
NIC_NO_FREE_VF: Final = "NicNoFreeVf"
INSUFFICIENT_RDMA: Final = "Insufficient rdma devices"
INSUFFICIENT_VFS: Final = "Insufficient rdma VirtualFunctions"

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class NicGrant:
    """One NIC given to one container: ``units`` of it, as a whole PF or as one VF."""

    nic: str
    """The PF bus id."""
    minor: int
    units: int
    vf: VirtualFunction | None = None

    @property
    def bus_id(self) -> str:
        """The function the container uses: the VF's bus id, else the PF's."""
        return self.nic if self.vf is None else self.vf.bus_id


PodNics = tuple[tuple[NicGrant, ...], ...]
"""One entry per container slot (init containers first), like a HAMi pod device list."""


def _zero(_: object) -> int:
    return 0


def order_preferred(
    items: Sequence[_T],
    *,
    scope: Callable[[_T], str],
    minor: Callable[[_T], int],
    preferred: Collection[str],
    score: Callable[[_T], int] = _zero,
) -> list[_T]:
    """Koordinator's secondary-device order: round robin over ``preferred`` scopes, then the rest.

    Within a scope items go by score (highest first) then minor; each round (the n-th item of
    every preferred scope) is sorted the same way; the other items follow, sorted the same way.
    """

    def key(item: _T) -> tuple[int, int]:
        return (-score(item), minor(item))

    groups: dict[str, list[_T]] = {}
    rest: list[_T] = []
    for item in items:
        where = scope(item)
        if where in preferred:
            groups.setdefault(where, []).append(item)
        else:
            rest.append(item)
    for members in groups.values():
        members.sort(key=key)
    ordered: list[_T] = []
    depth = max((len(members) for members in groups.values()), default=0)
    for round_ in range(depth):
        batch = [members[round_] for members in groups.values() if round_ < len(members)]
        ordered.extend(sorted(batch, key=key))
    ordered.extend(sorted(rest, key=key))
    return ordered


@dataclass(slots=True)
class _Pod:
    """Working state of one pod's placement (private, mutable while it runs)."""

    usage: NicUsage
    request: JointRequest
    static: tuple[str, ...]
    vf_choices: tuple[tuple[VirtualFunction, ...], ...]
    given_vfs: set[str]


def _static_refusals(usage: NicUsage, request: JointRequest) -> tuple[str, ...]:
    layout = usage.layout
    refusals: list[str] = []
    others_claim = usage.nic_claims
    for position, nic in enumerate(layout.nics):
        scope = layout.scopes[position]
        if not nic.healthy:
            refusal = NIC_NOT_HEALTHY
        elif request.nic_selector is not None and not request.nic_selector.matches(nic.labels):
            refusal = NIC_SELECTOR_MISMATCH
        elif scope in others_claim:
            refusal = NIC_PCIE_CLAIMED
        elif request.nic_exclusive_pcie and usage.scope_touched(scope):
            refusal = NIC_PCIE_BUSY
        elif request.vf_selector is not None and not vfs_matching(nic, request.vf_selector):
            refusal = NIC_VF_SELECTOR_MISMATCH
        else:
            refusal = ""
        refusals.append(refusal)
    return tuple(refusals)


def _vf_choices(usage: NicUsage, request: JointRequest) -> tuple[tuple[VirtualFunction, ...], ...]:
    selector = request.vf_selector
    if selector is None:
        return tuple(() for _ in usage.layout.nics)
    designated = request.designated_vfs
    choices = []
    for nic in usage.layout.nics:
        matching = vfs_matching(nic, selector)
        named = tuple(vf for vf in matching if vf.bus_id in designated)
        choices.append(named or matching)
    return tuple(choices)


def _free_vf(pod: _Pod, position: int) -> VirtualFunction | None:
    for vf in pod.vf_choices[position]:
        if not pod.usage.vf_taken(vf.bus_id) and vf.bus_id not in pod.given_vfs:
            return vf
    return None


def _try(pod: _Pod, position: int, units: list[int], demand: NicDemand) -> NicGrant | str:
    """The grant NIC ``position`` can make now, or the reason it cannot."""
    refusal = pod.static[position]
    if refusal:
        return refusal
    layout = pod.usage.layout
    if layout.units_per_nic - units[position] < demand.units:
        return NIC_INSUFFICIENT_UNITS
    vf = None
    if pod.request.must_vf:
        vf = _free_vf(pod, position)
        if vf is None:
            return NIC_NO_FREE_VF
    nic = layout.nics[position]
    return NicGrant(nic=nic.id, minor=nic.minor, units=demand.units, vf=vf)


_SELECTOR_TEXT: Final = {
    NIC_SELECTOR_MISMATCH: "rdma.selector matches no RDMA NIC of this node",
    NIC_VF_SELECTOR_MISMATCH: "rdma.vfSelector matches no VF group of this node's NICs",
}


def _insufficient(refused: dict[int, str], nics: int, detail: str = "") -> str:
    counts: dict[str, int] = {}
    for refusal in refused.values():
        counts[refusal] = counts.get(refusal, 0) + 1
    parts = [detail] if detail else []
    parts.extend(
        f"{keys.KOORD_DEVICE_ALLOCATE_HINT} {text}"
        for word, text in _SELECTOR_TEXT.items()
        if nics and counts.get(word) == nics
    )
    parts.append(why.format_reasons(counts, nics))
    return f"{INSUFFICIENT_RDMA}: {'; '.join(part for part in parts if part)}"


def _apply_for_all(pod: _Pod, units: list[int], demand: NicDemand) -> tuple[NicGrant, ...] | str:
    layout = pod.usage.layout
    selector = pod.request.nic_selector
    targets = [
        p for p, nic in enumerate(layout.nics) if selector is None or selector.matches(nic.labels)
    ]
    if not targets:
        what = "matches the rdma selector" if selector is not None else "exists"
        return f"{keys.KOORD_DEVICE_ALLOCATE_HINT}: rdma ApplyForAll: no RDMA NIC {what} here"
    grants: list[NicGrant] = []
    refused: dict[int, str] = {}
    for position in targets:
        outcome = _try(pod, position, units, demand)
        if isinstance(outcome, str):
            refused[position] = outcome
        else:
            grants.append(outcome)
    if refused:
        detail = f"ApplyForAll needs all {len(targets)} matching NICs"
        return _insufficient(refused, len(layout.nics), detail)
    return tuple(grants)


def _container(
    pod: _Pod,
    units: list[int],
    demand: NicDemand,
    preferred: tuple[str, ...],
    same_pcie: bool,
) -> tuple[NicGrant, ...] | str:
    if demand.apply_for_all:
        return _apply_for_all(pod, units, demand)
    layout = pod.usage.layout
    scopes = layout.scopes
    wanted = set(preferred)
    positions = range(len(layout.nics))
    order = order_preferred(
        positions,
        scope=scopes.__getitem__,
        minor=lambda p: layout.nics[p].minor,
        preferred=wanted,
    )
    if same_pcie:
        order = [p for p in order if scopes[p] in wanted]
    want = max(demand.count, len(wanted)) if same_pcie else demand.count
    taken: dict[int, NicGrant] = {}
    covered: set[str] = set()
    refused: dict[int, str] = {}

    def attempt(position: int) -> None:
        outcome = _try(pod, position, units, demand)
        if isinstance(outcome, str):
            refused[position] = outcome
            return
        refused.pop(position, None)
        taken[position] = outcome
        covered.add(scopes[position])
        units[position] += demand.units

    # First one NIC in every preferred scope, then fill up to the count in order.
    for position in order:
        if scopes[position] in wanted and scopes[position] not in covered:
            attempt(position)
    for position in order:
        if len(taken) >= want:
            break
        if position not in taken:
            attempt(position)
    if len(taken) < want or (same_pcie and covered != wanted):
        for position in taken:
            units[position] -= demand.units
        missing = sorted(wanted - covered) if same_pcie else []
        detail = f"want {want} NIC(s), {len(taken)} usable"
        if missing:
            detail += f"; no usable NIC on PCIe switch {', '.join(missing)}"
        return _insufficient(refused, len(layout.nics), detail)
    grants = sorted(taken.values(), key=lambda grant: grant.minor)
    pod.given_vfs.update(grant.vf.bus_id for grant in grants if grant.vf is not None)
    return tuple(grants)


@dataclass(frozen=True, slots=True)
class NicPlanner:
    """One pod's view of one node's NICs: the per-NIC checks that do not depend on which GPUs
    the pod gets, computed once (:func:`nic_planner`) and reused for every GPU candidate."""

    usage: NicUsage
    request: JointRequest
    static: tuple[str, ...]
    vf_choices: tuple[tuple[VirtualFunction, ...], ...]

    def _pod(self) -> _Pod:
        return _Pod(self.usage, self.request, self.static, self.vf_choices, set())

    def place(
        self,
        requests: PodDeviceRequests,
        *,
        preferred: Sequence[str] = (),
        same_pcie: bool = False,
    ) -> PodNics | str:
        """NIC grants for every container slot of the pod, or why the node cannot give them.

        ``preferred``: PCIe scopes to place NICs in first (the pod's GPU switches under joint
        allocation); ``same_pcie``: use only those and cover every one of them.
        """
        slots = requests.slots
        request = self.request
        if not request.wants_nics:
            return tuple(() for _ in slots)
        usage = self.usage
        layout = usage.layout
        if not layout.nics:
            return f"{INSUFFICIENT_RDMA}: the node has no RDMA NIC"
        if request.must_vf and not layout.has_vfs:
            return (
                f"{INSUFFICIENT_VFS}: {keys.KOORD_DEVICE_ALLOCATE_HINT} rdma.vfSelector asks for "
                "a VF, but no RDMA NIC of the node has SR-IOV VFs"
            )
        pod = self._pod()
        scopes = tuple(dict.fromkeys(preferred))
        shared = list(usage.units)
        result: list[tuple[NicGrant, ...]] = []
        for index, slot in enumerate(slots):
            demand = request.demand(index)
            if demand is None:
                result.append(())
                continue
            units = list(usage.units) if slot.is_init else shared
            outcome = _container(pod, units, demand, scopes, same_pcie)
            if isinstance(outcome, str):
                return f"{outcome} (container {slot.name!r})" if slot.name else outcome
            result.append(outcome)
        return tuple(result)

    def usable_scopes(self) -> frozenset[str]:
        """Scopes holding a NIC that could serve at least the smallest of the pod's demands now.

        A necessary condition only (units and VFs are not yet shared out among containers), so
        pruning GPUs on other scopes under ``SamePCIe`` never loses a feasible placement.
        """
        units = [demand.units for demand in self.request.rdma if demand is not None]
        if not units:
            return frozenset()
        least = min(units)
        pod = self._pod()
        usage = self.usage
        layout = usage.layout
        return frozenset(
            layout.scopes[position]
            for position in range(len(layout.nics))
            if not self.static[position]
            and usage.free_units(position) >= least
            and (not self.request.must_vf or _free_vf(pod, position) is not None)
        )


def nic_planner(usage: NicUsage, request: JointRequest) -> NicPlanner:
    """The planner for one pod (``request``) on one node (``usage``)."""
    return NicPlanner(
        usage=usage,
        request=request,
        static=_static_refusals(usage, request),
        vf_choices=_vf_choices(usage, request),
    )


def place_pod_nics(
    usage: NicUsage,
    requests: PodDeviceRequests,
    request: JointRequest,
    *,
    preferred: Sequence[str] = (),
    same_pcie: bool = False,
) -> PodNics | str:
    """:meth:`NicPlanner.place` for a one-off placement."""
    return nic_planner(usage, request).place(requests, preferred=preferred, same_pcie=same_pcie)
