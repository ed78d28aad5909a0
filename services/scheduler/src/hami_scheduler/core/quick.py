"""A fast "does the pod fit this node?" that usually answers without the full decision.

Selecting a node needs, per candidate, only *whether* the pod fits and the node's score; the
score is the usage score before the pod, so it does not depend on which devices are chosen.
Whether a device passes a request's per-device checks depends only on that device, and usage
only grows while a pod is fitted, so a device refused on the untouched node stays refused.
Hence, for each container request of ``nums`` devices, counting the devices that pass on the
untouched node gives:

* fewer than ``nums`` pass → the pod cannot fit (the full decision would fail too);
* an **init** container, or the first app container asking that vendor: at least ``nums``
  pass → it fits (init containers are fitted alone on the untouched node);
* a later app container: at least ``nums`` + (devices that earlier app containers take from
  the vendor) pass → it fits whatever the earlier ones took, since they touch no more devices
  than that;
* in between → *unknown*: only the full
  :func:`~hami_scheduler.core.decide.decide_node` knows (device order decides).

With numa-bind the same holds per NUMA node: the sorted device list keeps each NUMA node's
devices together and the fit restarts its run at each NUMA boundary, so a request fits exactly
when one NUMA node has ``nums`` passing devices.  Two orders break that and go to the full
decision: the single ``mutex`` policy (sorted by use, not grouped by NUMA) and
``topology-aware`` (it keeps only the last NUMA run it visits).

:func:`quick_verdict` returns ``True`` / ``False`` / ``None`` (unknown) accordingly.  It reads
the node's :class:`~hami_scheduler.core.usage.open_devices.OpenDevices` (devices that are
healthy, not MIG, not cordoned and have a free slot, sorted by free memory): the bounds refuse
most full nodes without a scan, and a scan stops once enough devices pass or memory runs
short.  A node with MIG GPUs or MIG reservations is always left to the full decision, and so is
any pod asking a vendor with a fit or node score of its own (:mod:`.strategy`): only the full
decision knows those.

A namespace quota is judged once per pod (:func:`_quota_effect`): when it cannot refuse any
device it is ignored, when it refuses the pod everywhere every verdict is ``False``; with
percentage requests it is judged per node by the node's largest device; only with init
containers does every node take the full decision, since the quota check then depends on the
devices accepted before it.  Property tests check that a
definite verdict always equals ``decide_node(...).fits``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from hami_protocol.request.containers import PERCENTAGE_UNSET
from hami_scheduler.core.fit import MAX_CORES, clamped_cores
from hami_scheduler.core.plan import DeviceSelectors, PodPlan
from hami_scheduler.core.quota import VendorQuota
from hami_scheduler.core.strategy import strategy_for
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.usage.node import NodeUsage
from hami_scheduler.core.usage.open_devices import OpenRow

__all__ = ["QuickPlan", "QuickStep", "QuotaBound", "quick_plan", "quick_verdict"]


@dataclass(frozen=True, slots=True)
class QuickStep:
    """One vendor request of one container, pre-digested for the scan."""

    vendor: str
    nums: int
    sure: int
    """Passing devices that make the step fit whatever came before (``nums`` + earlier takes)."""
    memreq: int
    percentage: int
    """The memory percentage when ``memreq`` is 0, else :data:`PERCENTAGE_UNSET`."""
    cores: int
    mutex: bool
    type_matches: bool
    """The request names the vendor it is filed under (always, for parsed pods)."""
    selectors: DeviceSelectors
    by_type: bool
    by_uuid: bool
    numa_bind: bool


@dataclass(frozen=True, slots=True)
class QuickPlan:
    steps: tuple[QuickStep, ...]
    blocked: bool = False
    """The namespace quota refuses this pod on every node."""
    quota_bounds: tuple[QuotaBound, ...] = ()
    """Quotas that may bind on some nodes: there the verdict is unknown."""


def quick_plan(plan: PodPlan, *, relaxed: bool = False) -> QuickPlan | None:
    """The fast form of ``plan``, or ``None`` when only the full decision can judge it.

    ``relaxed`` always gives a plan, by leaving out numa-bind and any quota that might bind:
    its ``False`` is still certain (those only refuse more), its ``True`` is not — callers use
    it to drop nodes that cannot fit before the full decision.
    """
    policy = plan.gpu_policy
    numa_runs_split = policy.entries == ("mutex",) or policy.topology_aware
    steps: list[QuickStep] = []
    bounds: list[QuotaBound] = []
    taken_by_apps: dict[str, int] = {}
    for slot in plan.requests.slots:
        for word, request in slot.requests.items():
            if not strategy_for(word).standard:
                # A vendor's own fit and score are known only to the full decision; leaving its
                # request out of a relaxed plan keeps that plan's "no" certain.
                if not relaxed:
                    return None
                continue
            selectors = plan.selectors_for(word)
            quota = _quota_effect(plan, word)
            if quota == "blocks":
                return QuickPlan((), blocked=True)
            numa_bind = selectors.numa_bind and not relaxed
            if not relaxed and (quota == "unknown" or (numa_bind and numa_runs_split)):
                return None
            if not relaxed and isinstance(quota, QuotaBound) and quota not in bounds:
                bounds.append(quota)
            before = 0 if slot.is_init else taken_by_apps.get(word, 0)
            steps.append(
                QuickStep(
                    vendor=word,
                    nums=request.nums,
                    sure=request.nums + before,
                    memreq=request.memreq,
                    percentage=PERCENTAGE_UNSET
                    if request.memreq > 0
                    else request.mem_percentagereq,
                    cores=clamped_cores(request),
                    mutex=policy.mutex,
                    type_matches=request.type == word,
                    selectors=selectors,
                    by_type=selectors.filters_type,
                    by_uuid=selectors.filters_uuid,
                    numa_bind=numa_bind,
                )
            )
            if not slot.is_init:
                taken_by_apps[word] = before + request.nums
    return QuickPlan(tuple(steps), quota_bounds=tuple(bounds))


@dataclass(frozen=True, slots=True)
class QuotaBound:
    """A quota that binds or not depending on the node: it cannot bind on a node where the pod's
    largest conceivable total, with percentages of the node's largest open device, fits."""

    vendor: str
    quota: VendorQuota
    fixed_memory: int
    """MiB of the requests that name MiB, every device counted."""
    percentages: tuple[tuple[int, int], ...]
    """``(nums, percentage)`` of the requests that name a percentage."""
    cores: int

    def never_binds_on(self, node: NodeUsage) -> bool:
        largest = node.open(self.vendor).max_totalmem
        memory = self.fixed_memory + sum(n * (largest * p // 100) for n, p in self.percentages)
        return self.quota.allows(memory, self.cores)


def _quota_effect(plan: PodPlan, vendor: str) -> QuotaBound | Literal["none", "blocks", "unknown"]:
    """What the vendor's namespace quota does to this pod, decided once for all nodes.

    * ``none``: even the pod's largest conceivable total — every device of every container
      counted in full, never collapsed — fits, so no device is ever refused for quota;
    * ``blocks``: some container is refused on every device of every node: its single cheapest
      device already breaks the quota, or (app containers with fixed memory only) the running
      total, which then depends only on how many devices were taken, breaks it;
    * a :class:`QuotaBound`: percentage requests make the largest total depend on the node's
      devices; nodes where even that fits are judged as without quota, others fully;
    * ``unknown``: init containers are involved (their usage collapses by device) — only the
      full decision can tell.
    """
    quota = plan.quota_for(vendor)
    if quota is None:
        return "none"
    memory = cores = 0
    percentages: list[tuple[int, int]] = []
    with_init = False
    for slot in plan.requests.slots:
        request = slot.requests.get(vendor)
        if request is None:
            continue
        with_init = with_init or slot.is_init
        per_device = clamped_cores(request)
        if request.memreq <= 0 and request.mem_percentagereq != PERCENTAGE_UNSET:
            percentages.append((request.nums, request.mem_percentagereq))
            if not quota.allows(0, per_device):
                return "blocks"
        else:
            if not quota.allows(request.memreq, per_device):
                return "blocks"
            memory += request.nums * request.memreq
        cores += request.nums * per_device
    if quota.limits.memory is None:
        percentages = []
    if not percentages and quota.allows(memory, cores):
        return "none"
    if with_init:
        return "unknown"
    if not percentages:
        return "blocks"
    return QuotaBound(vendor, quota, memory, tuple(percentages), cores)


def quick_verdict(node: NodeUsage, plan: QuickPlan) -> bool | None:
    """``True``/``False`` when certain the pod fits/does not fit; ``None`` when unknown."""
    if plan.blocked:
        return False
    if node.involves_mig:
        return None  # slices, not open rows, decide there
    for bound in plan.quota_bounds:
        if not bound.never_binds_on(node):
            return None
    certain = True
    for step in plan.steps:
        view = node.open(step.vendor)
        percentage = step.percentage
        if (
            step.nums > len(view.rows)
            or step.cores > view.max_free_cores
            or step.memreq > view.max_free_mem
            or (percentage != PERCENTAGE_UNSET and percentage > view.max_percentage)
            or not step.type_matches
        ):
            return False
        passing = _most_per_numa(view.rows, step) if step.numa_bind else _count(view.rows, step)
        if passing < step.nums:
            return False
        if passing < step.sure:
            certain = False
    return True if certain else None


def _passing(rows: tuple[OpenRow, ...], step: QuickStep) -> Iterator[DeviceUsage]:
    """The devices of ``rows`` passing every per-device check, in row order."""
    memreq, percentage, cores, mutex = step.memreq, step.percentage, step.cores, step.mutex
    selectors, by_type, by_uuid = step.selectors, step.by_type, step.by_uuid
    for free_mem, free_cores, totalmem, totalcore, usedcores, used, dev in rows:
        if free_mem < memreq:
            return  # rows are sorted by free memory: no later row has enough
        if (
            free_cores < cores
            or (mutex and used)
            or (percentage != PERCENTAGE_UNSET and free_mem < totalmem * percentage // 100)
            or (cores == MAX_CORES and totalcore == MAX_CORES and used)
            or (cores == 0 and totalcore and usedcores == totalcore)
            or (by_type and not selectors.type_ok(dev.type, dev.mode))
            or (by_uuid and not selectors.uuid_ok(dev.uuid))
        ):
            continue
        yield dev


def _count(rows: tuple[OpenRow, ...], step: QuickStep) -> int:
    """Rows passing every per-device check, counted up to ``step.sure``."""
    passing, enough = 0, step.sure
    for _ in _passing(rows, step):
        passing += 1
        if passing >= enough:
            break
    return passing


def _most_per_numa(rows: tuple[OpenRow, ...], step: QuickStep) -> int:
    """The most passing rows on any one NUMA node, counted up to ``step.sure``."""
    per_numa: dict[int, int] = {}
    most, enough = 0, step.sure
    for dev in _passing(rows, step):
        count = per_numa[dev.numa] = per_numa.get(dev.numa, 0) + 1
        if count > most:
            most = count
            if most >= enough:
                break
    return most
