"""kube-scheduler's structured-parameters allocator for one node (contract §3.1–§3.3).

:func:`allocate` gets the pod's unallocated claims in ``spec.resourceClaims`` order, the node,
the ResourceSlices, the DeviceClasses and what other claims already hold, and returns one
``status.allocation`` per claim (:class:`Allocated`), or :class:`Unfit` with the reason
kube-scheduler gives for the node, or raises :class:`AllocatorError` for what aborts the
scheduling attempt upstream (a CEL error, an ``All`` request over a pool being updated, too many
devices for one claim).

The search is depth-first with full backtracking and the first complete solution wins: claims,
then requests in spec order, then device slots ``0..count-1``; a ``firstAvailable`` request tries
its subrequests in order.  Within one request the next slot continues *after* the device the
previous slot took (combinations, never the same device twice), over the devices of the usable
pools in :mod:`.pools` order.  Per candidate device: (a) in use?  (b) class then request
selectors, (c) capacity (:mod:`.capacity`), (d) NoSchedule/NoExecute taints need a toleration,
(e) every claim constraint (``matchAttribute``, ``distinctAttribute``).  A shared device
(``allowMultipleAllocations``) is never in use unless something holds it whole; it records the
capacity it consumes and gets a fresh ``shareID``.  An exclusive device is in use when held or
picked earlier in this run.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from hami_kube.objects import NodeView
from hami_kubesim.dra.capacity import charge, fits
from hami_kubesim.dra.cel import CelError, device_variable, selector_matches
from hami_kubesim.dra.claims import (
    MAX_DEVICES_PER_CLAIM,
    AllocatedState,
    ClaimSpec,
    DeviceRequest,
    Request,
    parse_claim,
)
from hami_kubesim.dra.model import Attribute, Device, DeviceId, InvalidObjectError
from hami_kubesim.dra.pools import Pool, gather_pools
from hami_kubesim.dra.results import Pick, allocation_result
from hami_kubesim.scheduler.predicates import tolerates

__all__ = [
    "CANNOT_ALLOCATE",
    "Allocated",
    "AllocatorError",
    "ClaimAllocation",
    "Unfit",
    "allocate",
    "missing_class_reason",
]

CANNOT_ALLOCATE: Final = "cannot allocate all claims"
_FILTERED_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


class AllocatorError(Exception):
    """The allocation cannot be attempted at all (upstream returns an error, not "no fit")."""


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    claim: str  # namespace/name
    allocation: Mapping[str, Any]  # what goes into status.allocation


@dataclass(frozen=True, slots=True)
class Allocated:
    claims: tuple[ClaimAllocation, ...]


@dataclass(frozen=True, slots=True)
class Unfit:
    reason: str = CANNOT_ALLOCATE


def missing_class_reason(name: str) -> str:
    return f"device class {name} does not exist"


def allocate(
    claims: Sequence[Mapping[str, Any]],
    *,
    node: NodeView,
    slices: Iterable[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    allocated: AllocatedState,
    new_share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> Allocated | Unfit:
    """Allocate every claim in ``claims`` on ``node``, all or nothing (see the module doc).

    ``classes`` maps DeviceClass names to the objects; ``allocated`` must already include the
    in-flight allocations of other pods.  ``new_share_id`` makes results reproducible in tests.
    """
    try:
        specs = [parse_claim(claim) for claim in claims]
    except InvalidObjectError as exc:
        raise AllocatorError(str(exc)) from exc
    for spec in specs:
        for request in spec.requests:
            for alternative in request.alternatives:
                if alternative.class_name not in classes:
                    return Unfit(missing_class_reason(alternative.class_name))
    search = _Search(gather_pools(slices, node), classes, allocated, new_share_id)
    picks = search.run(specs)
    if picks is None:
        return Unfit()
    return Allocated(
        tuple(
            ClaimAllocation(spec.key, allocation_result(spec, claim_picks, classes, node.name))
            for spec, claim_picks in zip(specs, picks, strict=True)
        )
    )


class _Step(NamedTuple):
    """Where the search is: claim, request, the alternative tried and how many devices."""

    ci: int
    ri: int
    request: DeviceRequest
    fixed: tuple[Device, ...] | None  # an All request's device list
    goal: int


@dataclass(slots=True)
class _Search:
    pools: tuple[Pool, ...]
    classes: Mapping[str, Mapping[str, Any]]
    allocated: AllocatedState
    new_share_id: Callable[[], str]
    devices: tuple[Device, ...] = ()
    specs: Sequence[ClaimSpec] = ()
    plans: list[list[list[tuple[Device, ...] | None]]] = field(default_factory=list)
    exclusive: set[DeviceId] = field(default_factory=set)  # picked in this run
    consumed: dict[DeviceId, dict[str, int]] = field(default_factory=dict)  # this run's shares
    picks: list[list[Pick]] = field(default_factory=list)
    _selected: dict[tuple[str, DeviceId], bool] = field(default_factory=dict)
    _variables: dict[DeviceId, Any] = field(default_factory=dict)

    def run(self, specs: Sequence[ClaimSpec]) -> list[list[Pick]] | None:
        self.devices = tuple(d for pool in self.pools if pool.usable for d in pool.devices)
        self.specs = specs
        self.plans = [self._plan(spec) for spec in specs]
        self.picks = [[] for _ in specs]
        if not self._claim(0):
            return None
        return [list(p) for p in self.picks]

    # -- planning: what each request needs, checked before searching --------------------------

    def _plan(self, spec: ClaimSpec) -> list[list[tuple[Device, ...] | None]]:
        """Per request and alternative, the fixed device list of an ``All`` request (``None``
        for ExactCount); raises for what upstream refuses outright."""
        plan: list[list[tuple[Device, ...] | None]] = []
        total = 0
        for request in spec.requests:
            fixed: list[tuple[Device, ...] | None] = []
            for alternative in request.alternatives:
                if alternative.all_devices:
                    devices = self._all_devices(spec, request, alternative)
                    fixed.append(devices)
                else:
                    fixed.append(None)
            first = request.alternatives[0] if request.alternatives else None
            if len(request.alternatives) == 1 and first is not None:
                total += len(fixed[0]) if fixed[0] is not None else first.count
            plan.append(fixed)
        if total > MAX_DEVICES_PER_CLAIM:
            raise AllocatorError(
                f"claim {spec.key}: number of requested devices {total} exceeds the claim "
                f"limit of {MAX_DEVICES_PER_CLAIM}"
            )
        return plan

    def _all_devices(
        self, spec: ClaimSpec, request: Request, alternative: DeviceRequest
    ) -> tuple[Device, ...]:
        for pool in self.pools:
            if pool.incomplete:
                raise AllocatorError(
                    f"claim {spec.key}, request {request.name}: asks for all devices, but "
                    f"resource pool {pool} is currently being updated"
                )
            if pool.invalid:
                raise AllocatorError(
                    f"claim {spec.key}, request {request.name}: asks for all devices, but "
                    f"resource pool {pool} is currently invalid: {pool.invalid}"
                )
        return tuple(
            d
            for d in self.devices
            if self._selects(alternative, d) and charge(d, alternative.capacity) is not None
        )

    # -- the depth-first search ---------------------------------------------------------------

    def _claim(self, ci: int) -> bool:
        return ci == len(self.specs) or self._request(ci, 0)

    def _request(self, ci: int, ri: int) -> bool:
        spec = self.specs[ci]
        if ri == len(spec.requests):
            return self._claim(ci + 1)
        for alternative, fixed in zip(
            spec.requests[ri].alternatives, self.plans[ci][ri], strict=True
        ):
            if fixed is not None and not fixed:
                continue  # All needs at least one device
            goal = len(fixed) if fixed is not None else alternative.count
            if self._slot(_Step(ci, ri, alternative, fixed, goal), 0, 0):
                return True
        return False

    def _slot(self, step: _Step, slot: int, start: int) -> bool:
        if slot == step.goal:
            return self._request(step.ci, step.ri + 1)
        candidates = (step.fixed[slot],) if step.fixed is not None else self.devices[start:]
        for offset, device in enumerate(candidates):
            pick = self._try(self.specs[step.ci], step.ci, step.request, device)
            if pick is None:
                if step.fixed is not None:
                    return False  # every device of an All request must be allocatable
                continue
            self._record(step.ci, pick)
            if self._slot(step, slot + 1, start + offset + 1):
                return True
            self._rollback(step.ci, pick)
        return False

    # -- one candidate device ---------------------------------------------------------------

    def _try(self, spec: ClaimSpec, ci: int, request: DeviceRequest, device: Device) -> Pick | None:
        if self._in_use(ci, request, device) or not self._selects(request, device):
            return None
        consumed = charge(device, request.capacity)
        if consumed is None:
            return None
        if device.multi and not request.admin_access:
            held = self.allocated.consumed.get(device.id, {})
            if not fits(device, consumed, held, self.consumed.get(device.id, {})):
                return None
        elif not fits(device, consumed):
            return None
        if any(
            t.get("effect") in _FILTERED_EFFECTS and not tolerates(request.tolerations, t)
            for t in device.taints
        ):
            return None
        if not self._constraints_hold(spec, ci, request, device):
            return None
        if device.multi:
            return Pick(request, device, consumed, self.new_share_id())
        return Pick(request, device, None)

    def _in_use(self, ci: int, request: DeviceRequest, device: Device) -> bool:
        if request.admin_access:  # ignores other claims; avoids duplicates in its own claim only
            return not device.multi and any(p.device.id == device.id for p in self.picks[ci])
        if device.id in self.allocated.exclusive:
            return True
        if device.multi:
            return False
        # An exclusive device is in use when picked in this run or shared by an allocation made
        # while it was multi-allocatable (it behaves exclusive only once those are gone).
        return device.id in self.exclusive or device.id in self.allocated.consumed

    def _selects(self, request: DeviceRequest, device: Device) -> bool:
        class_spec = (self.classes.get(request.class_name) or {}).get("spec") or {}
        expressions = [
            e
            for s in class_spec.get("selectors") or ()
            if isinstance(e := ((s or {}).get("cel") or {}).get("expression"), str)
        ]
        return all(self._matches(e, device) for e in (*expressions, *request.selectors))

    def _matches(self, expression: str, device: Device) -> bool:
        key = (expression, device.id)
        cached = self._selected.get(key)
        if cached is None:
            variable = self._variables.get(device.id)
            if variable is None:
                variable = self._variables[device.id] = device_variable(device)
            try:
                cached = self._selected[key] = selector_matches(expression, variable)
            except CelError as exc:
                raise AllocatorError(
                    f"CEL {exc} (selector {expression!r}, device {device.id})"
                ) from exc
        return cached

    def _constraints_hold(
        self, spec: ClaimSpec, ci: int, request: DeviceRequest, device: Device
    ) -> bool:
        for constraint in spec.constraints:
            if not constraint.applies_to(request.name):
                continue
            others = [
                p.device.attributes.get(name)
                for p in self.picks[ci]
                if constraint.applies_to(p.request.name)
                for name in (constraint.match_attribute or constraint.distinct_attribute,)
            ]
            mine = device.attributes.get(
                constraint.match_attribute or constraint.distinct_attribute
            )
            if mine is None or not _constraint_ok(constraint.match_attribute != "", mine, others):
                return False
        return True

    def _record(self, ci: int, pick: Pick) -> None:
        self.picks[ci].append(pick)
        if pick.consumed is not None and not pick.request.admin_access:
            held = self.consumed.setdefault(pick.device.id, {})
            for name, amount in pick.consumed.items():
                held[name] = held.get(name, 0) + amount
        elif pick.consumed is None and not pick.request.admin_access:
            self.exclusive.add(pick.device.id)

    def _rollback(self, ci: int, pick: Pick) -> None:
        self.picks[ci].pop()
        if pick.consumed is not None and not pick.request.admin_access:
            held = self.consumed[pick.device.id]
            for name, amount in pick.consumed.items():
                held[name] -= amount
            if not any(held.values()):
                del self.consumed[pick.device.id]
        elif pick.consumed is None and not pick.request.admin_access:
            self.exclusive.discard(pick.device.id)


def _constraint_ok(match: bool, mine: Attribute, others: list[Attribute | None]) -> bool:
    if match:
        return all(o == mine for o in others)
    return all(o is not None and o != mine for o in others)
