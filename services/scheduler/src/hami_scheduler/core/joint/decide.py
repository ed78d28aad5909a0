"""One pod on one node with GPUs *and* RDMA NICs: :func:`decide_joint`, and :func:`select_joint`.

GPUs are HAMi's (whole or shared slices, chosen by :func:`~hami_scheduler.core.decide.decide_node`
under the pod's GPU policy); NICs and VFs are chosen by :mod:`.nicfit`.  How they meet:

* **No joint allocation, no GPU scope** (``device-joint-allocate`` absent or reduced to one type):
  HAMi's GPU fit on the node, then the NICs independently, by minor.
* **Joint allocation or a gpu ``requiredTopologyScope``**: the candidate GPU sets of
  :func:`~hami_scheduler.core.gpusets.gpu_sets` (each switch, then within each NUMA node, then
  the whole node; bounded) are tried in order.  For each, HAMi's fit runs on the node restricted
  to that set; under joint allocation the NICs are then placed preferring the PCIe switches of
  the GPUs chosen.  Each success is graded: 0 = the pod's NICs sit on exactly the switches of its
  GPUs, 1 = every NIC shares a NUMA node with a GPU, 2 = anything else.  The first grade-0
  candidate is taken at once; otherwise the first candidate with the best grade — the proposal's
  "same PCIe, else same NUMA node, else the whole node".  Whether the NICs fit at all does not
  depend on the GPUs without ``SamePCIe``, so that is asked once, up front; a candidate whose
  preferred NIC placement fails (the extra NIC per GPU switch can starve a later container) falls
  back to that placement.
* **``requiredScope: SamePCIe``** accepts grade 0 only.  GPUs on switches without a usable NIC are
  left out before the search (they can never be part of an answer), and unlike Koordinator the
  search goes on to other GPU sets when one fails (koordinator.md case A8).

**Exclusive PCIe claims** (``exclusivePolicy: PCIeLevel``, see :mod:`.rdma`): GPUs in a scope that
another pod claims for GPUs are never given; with a gpu ``PCIeLevel`` hint only GPUs in scopes
where no other pod holds any device are.  The decision lists the claims the pod makes.  A pod
without any Koordinator request goes through here too when the node has GPU claims (the result
is HAMi's fit on the unclaimed GPUs).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Final

from hami_protocol import keys
from hami_protocol.pod.devices import PodDevices
from hami_protocol.topology.koordinator import DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA, TopologyScope
from hami_scheduler.core import reasons as why
from hami_scheduler.core.decide import NodeDecision, decide_node
from hami_scheduler.core.gpusets import GpuPlace, gpu_sets
from hami_scheduler.core.joint.hints import NO_JOINT, JointRequest
from hami_scheduler.core.joint.nicfit import NicPlanner, PodNics, nic_planner
from hami_scheduler.core.joint.nics import Claim, NicUsage, build_nic_usage, nic_layout
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.select import Selection
from hami_scheduler.core.usage.node import NodeLayout, NodeUsage

__all__ = [
    "JOINT_RULES_VIOLATION",
    "TOPOLOGY_SCOPED_GPUS",
    "JointDecision",
    "decide_joint",
    "pod_gpu_uuids",
    "select_joint",
]

JOINT_RULES_VIOLATION: Final = "Device Joint-Allocate rules violation"
TOPOLOGY_SCOPED_GPUS: Final = "Insufficient Topology Scoped GPU Devices"

_NO_DEVICES: Final = PodDevices()


@dataclass(frozen=True, slots=True)
class JointDecision:
    """A node's answer for one pod: GPUs as HAMi lists them, NICs per container, claims."""

    node: str
    fits: bool
    score: float = 0.0
    devices: PodDevices = _NO_DEVICES
    """GPU lists per vendor, one segment per container (as :class:`NodeDecision`)."""
    nics: PodNics = ()
    """NIC grants per container slot (init containers first); empty when no NIC was asked."""
    claims: tuple[Claim, ...] = ()
    """Exclusive ``(type, scope)`` claims the pod makes."""
    reason: str = ""

    def node_decision(self) -> NodeDecision:
        """The GPU part, for code that writes HAMi's annotations."""
        return NodeDecision(
            node=self.node,
            fits=self.fits,
            score=self.score,
            devices=self.devices,
            reason=self.reason,
        )


def pod_gpu_uuids(devices: PodDevices) -> tuple[str, ...]:
    """Every device UUID in the pod's GPU lists, first-seen order."""
    seen: dict[str, None] = {}
    for _, pod in devices.entries:
        for container in pod:
            for device in container:
                seen.setdefault(device.uuid, None)
    return tuple(seen)


def _only(node: NodeUsage, keep: Collection[str]) -> NodeUsage:
    """``node`` with only the devices in ``keep`` (same name, cordon and pair scores)."""
    layout = node.layout
    uuids: list[str] = []
    devices = []
    vendor_positions: dict[str, tuple[int, ...]] = {}
    for word in layout.vendors:
        positions: list[int] = []
        for position in layout.vendor_positions[word]:
            uuid = layout.uuids[position]
            if uuid in keep:
                positions.append(len(uuids))
                uuids.append(uuid)
                devices.append(node.devices[position])
        vendor_positions[word] = tuple(positions)
    restricted = NodeLayout(
        name=layout.name,
        vendors=layout.vendors,
        uuids=tuple(uuids),
        cordon=layout.cordon,
        positions={uuid: position for position, uuid in enumerate(uuids)},
        vendor_positions=vendor_positions,
        pair_scores=layout.pair_scores,
        mig_gpus=layout.mig_gpus,
    )
    return NodeUsage(restricted, tuple(devices), node.mig)


def _pod_gpus(node: NodeUsage, plan: PodPlan) -> tuple[str, ...]:
    layout = node.layout
    return tuple(
        layout.uuids[position]
        for word in plan.vendors
        for position in layout.vendor_positions.get(word, ())
    )


def _blocked(node: NodeUsage, planner: NicPlanner, gpus: Iterable[str]) -> dict[str, str]:
    """GPUs this pod may not get, with why."""
    nics, request = planner.usage, planner.request
    layout = nics.layout
    claimed = nics.gpu_claims
    busy: set[str] = set()
    if request.gpu_exclusive_pcie:
        busy = {layout.gpu_scope(d.uuid) for d in node.devices if d.used > 0}
    usable: frozenset[str] | None = None
    if request.same_pcie:
        usable = planner.usable_scopes()
    blocked: dict[str, str] = {}
    same_pcie = f"{keys.KOORD_DEVICE_JOINT_ALLOCATE} requiredScope SamePCIe"
    for uuid in gpus:
        scope = layout.gpu_scope(uuid)
        if scope in claimed:
            blocked[uuid] = "another pod's exclusive (PCIeLevel) claim on their PCIe switch"
        elif scope in busy:
            blocked[uuid] = (
                f"{keys.KOORD_DEVICE_ALLOCATE_HINT} gpu PCIeLevel "
                "(another pod uses a device on their PCIe switch)"
            )
        elif usable is not None and not layout.gpu_switch(uuid):
            blocked[uuid] = f"{same_pcie} (their PCIe switch is unknown)"
        elif usable is not None and scope not in usable:
            blocked[uuid] = f"{same_pcie} (no usable RDMA NIC on their PCIe switch)"
    return blocked


def _grade(node: NodeUsage, nics: NicUsage, gpus: Iterable[str], placed: PodNics) -> int:
    layout = nics.layout
    gpu_scopes = set()
    gpu_numas = set()
    for uuid in gpus:
        gpu_scopes.add(layout.gpu_scope(uuid))
        device = node.device(uuid)
        if device is not None:
            gpu_numas.add(device.numa)
    positions = [layout.positions[g.nic] for grants in placed for g in grants]
    if {layout.scopes[p] for p in positions} == gpu_scopes:
        return 0
    if all(layout.nics[p].numa in gpu_numas for p in positions):
        return 1
    return 2


def _claims(
    nics: NicUsage, request: JointRequest, gpus: Iterable[str], placed: PodNics
) -> tuple[Claim, ...]:
    layout = nics.layout
    claims: set[Claim] = set()
    if request.gpu_exclusive_pcie:
        claims.update((DEVICE_TYPE_GPU, layout.gpu_scope(uuid)) for uuid in gpus)
    if request.nic_exclusive_pcie:
        claims.update(
            (DEVICE_TYPE_RDMA, layout.scopes[layout.positions[grant.nic]])
            for grants in placed
            for grant in grants
        )
    return tuple(sorted(claims))


def _fits(
    node: NodeUsage,
    nics: NicUsage,
    request: JointRequest,
    gpu: NodeDecision,
    placed: PodNics,
) -> JointDecision:
    gpus = pod_gpu_uuids(gpu.devices)
    return JointDecision(
        node=node.name,
        fits=True,
        score=node.base_score,
        devices=gpu.devices,
        nics=placed,
        claims=_claims(nics, request, gpus, placed),
    )


def _refused(node: NodeUsage, reason: str) -> JointDecision:
    return JointDecision(node=node.name, fits=False, reason=reason)


def _kept_out(blocked: Mapping[str, str]) -> str:
    if not blocked:
        return ""
    counts: dict[str, int] = {}
    for text in blocked.values():
        counts[text] = counts.get(text, 0) + 1
    return "; kept out: " + "; ".join(f"{n} GPU(s) by {text}" for text, n in sorted(counts.items()))


def decide_joint(
    node: NodeUsage, nics: NicUsage, plan: PodPlan, request: JointRequest = NO_JOINT
) -> JointDecision:
    """Place the pod's GPUs and NICs on this node (see the module doc)."""
    planner = nic_planner(nics, request)
    gpus = _pod_gpus(node, plan)
    blocked = _blocked(node, planner, gpus)
    allowed = [uuid for uuid in gpus if uuid not in blocked]
    if not (request.joint or request.gpu_scope is not None):
        gpu = decide_node(_only(node, allowed) if blocked else node, plan)
        if not gpu.fits:
            return _refused(node, gpu.reason + _kept_out(blocked))
        placed = planner.place(plan.requests)
        if isinstance(placed, str):
            return _refused(node, placed)
        return _fits(node, nics, request, gpu, placed)
    if request.same_pcie:
        if not allowed:
            return _refused(
                node,
                f"{keys.KOORD_DEVICE_JOINT_ALLOCATE}: {JOINT_RULES_VIOLATION}: requiredScope "
                f"SamePCIe: no PCIe switch holds both a usable GPU and a usable RDMA NIC"
                + _kept_out(blocked),
            )
        return _search(node, planner, plan, gpus=gpus, blocked=blocked, fallback=None)
    # Best effort: whether the NICs fit at all does not depend on the GPUs, so ask once.
    plain = planner.place(plan.requests)
    if isinstance(plain, str):
        return _refused(node, plain)
    return _search(node, planner, plan, gpus=gpus, blocked=blocked, fallback=plain)


def _search(
    node: NodeUsage,
    planner: NicPlanner,
    plan: PodPlan,
    *,
    gpus: tuple[str, ...],
    blocked: Mapping[str, str],
    fallback: PodNics | None,
) -> JointDecision:
    """Try the candidate GPU sets in order (module doc).  ``fallback``: the NICs placed without
    preference, used when the preferred placement fails (best effort only)."""
    nics, request = planner.usage, planner.request
    layout = nics.layout
    places = []
    for uuid in gpus:
        device = node.device(uuid)
        numa = 0 if device is None else device.numa
        busy = device is not None and device.used > 0
        places.append(GpuPlace(uuid, layout.gpu_switch(uuid), numa, busy, uuid not in blocked))
    widest = request.gpu_scope or TopologyScope.NODE
    best: tuple[int, NodeDecision, PodNics] | None = None
    nic_reason = ""
    tried = 0
    for candidate in gpu_sets(places, widest=widest):
        gpu = decide_node(_only(node, candidate), plan)
        if not gpu.fits:
            continue
        tried += 1
        chosen = pod_gpu_uuids(gpu.devices)
        placed: PodNics | str | None = fallback
        if request.joint:
            preferred = tuple(sorted({s for s in map(layout.gpu_switch, chosen) if s}))
            placed = planner.place(plan.requests, preferred=preferred, same_pcie=request.same_pcie)
            if isinstance(placed, str) and fallback is not None:
                placed = fallback
        if placed is None or isinstance(placed, str):
            nic_reason = nic_reason or (placed or "")
            continue
        grade = _grade(node, nics, chosen, placed) if request.joint else 0
        if request.same_pcie and grade:
            nic_reason = nic_reason or "the NICs do not sit on exactly the GPUs' PCIe switches"
            continue
        if best is None or grade < best[0]:
            best = (grade, gpu, placed)
        if grade == 0:
            break
    if best is not None:
        return _fits(node, nics, request, best[1], best[2])
    if tried:
        return _refused(
            node,
            f"{keys.KOORD_DEVICE_JOINT_ALLOCATE}: {JOINT_RULES_VIOLATION}: requiredScope "
            f"SamePCIe cannot be met ({tried} GPU set(s) tried): {nic_reason}",
        )
    allowed = [uuid for uuid in gpus if uuid not in blocked]
    whole = decide_node(_only(node, allowed), plan)
    if not whole.fits:
        return _refused(node, whole.reason + _kept_out(blocked))
    return _refused(
        node,
        f"{TOPOLOGY_SCOPED_GPUS}: {keys.KOORD_DEVICE_ALLOCATE_HINT} gpu.requiredTopologyScope "
        f"{widest.value}: no such scope of this node can hold the pod's GPUs" + _kept_out(blocked),
    )


def select_joint(
    plan: PodPlan,
    request: JointRequest,
    nodes: Mapping[str, NodeUsage],
    nics: Mapping[str, NicUsage],
    *,
    candidates: Iterable[str] | None = None,
) -> Selection[JointDecision]:
    """Decide every candidate in full and pick one by the node policy (ties: earlier candidate).

    A node without a :class:`NicUsage` has no NICs.  Every candidate pays a full
    :func:`decide_joint` (no quick verdicts), which joint pods can afford: they are few and their
    search is bounded per node.
    """
    names = list(nodes) if candidates is None else list(candidates)
    fitting: dict[str, float] = {}
    failed: dict[str, str] = {}
    decisions: dict[str, JointDecision] = {}
    for name in names:
        node = nodes.get(name)
        if node is None:
            failed[name] = why.NODE_UNREGISTERED
            continue
        usage = nics.get(name) or build_nic_usage(nic_layout(name))
        decision = decide_joint(node, usage, plan, request)
        if decision.fits:
            fitting[name] = decision.score
            decisions[name] = decision
        else:
            failed[name] = decision.reason
    if not fitting:
        return Selection(None, None, fitting, failed)
    pick = min if plan.node_policy == "spread" else max
    chosen = pick(fitting.items(), key=itemgetter(1))[0]
    return Selection(chosen, decisions[chosen], fitting, failed)
