"""The whole-pod decision for one node: does the pod fit, on which devices, with what score.

Containers are taken init containers first, then app containers (the order of
:class:`~hami_protocol.request.containers.PodDeviceRequests`):

* each **init container** is fitted on a fresh copy of the node — init containers run one
  after another, so none sees another's devices (nor the app containers');
* **app containers** are fitted one after another on one shared copy, each seeing the devices
  the previous ones took;
* within a container, every vendor request is fitted on that vendor's devices, sorted by the
  GPU policy with device scores computed once per container (:mod:`.score`);
* every vendor's choice keeps the namespace quota (:mod:`.quota`): the standard loop checks
  each device as HAMi's does, a vendor fit of its own has its whole choice checked
  (``ResourceQuotaNotFit``);
* a request for more devices than the node has of that vendor fails with
  ``NodeInsufficientDevice`` (unless the node has MIG GPUs, which may give one container several
  instances each); otherwise a failing container reports its fit's reason text;
* MIG instances are carved from one occupancy shared by every container, init containers
  included: an instance lives as long as its pod, so an init container's slices stay taken
  while the app containers run.  Their reservations are the decision's ``mig``.

The result lists, per vendor the pod requests, one segment per container in init+app order —
empty for containers without devices of that vendor — ready for
:func:`~hami_protocol.pod.devices.encode_pod_devices`.  (HAMi keys that padding by device model and
can shift entries, quirk Q1; this is the intended format.)  The node score is the usage score
before the pod (:attr:`~hami_scheduler.core.usage.node.NodeUsage.base_score`); NVIDIA adds nothing
to it.  The usage the pod will hold is :func:`decision_usage` — init peak against app sum per
device, exactly what the caches apply once the annotations are written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_protocol.pod.devices import (
    ContainerDevice,
    ContainerDevices,
    DeviceUsageSummary,
    PodDevices,
)
from hami_protocol.pod.mig import MigReservation
from hami_protocol.request.containers import ContainerDeviceRequest, ContainerSlot
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, QuotaProbe, fit_request
from hami_scheduler.core.mig import GpuOccupancy, HeldSlices, MigChoice
from hami_scheduler.core.plan import DeviceSelectors, PodPlan
from hami_scheduler.core.quota import PodQuotaTally, VendorQuota
from hami_scheduler.core.score import device_score, sort_devices
from hami_scheduler.core.strategy import ScoreArgs, strategy_for
from hami_scheduler.core.usage.apply import pod_usage
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.usage.node import NodeUsage
from hami_scheduler.core.vendors.context import NO_VENDOR_CONTEXT, VendorContext, vendor_context

__all__ = ["NodeDecision", "decide_node", "decision_usage"]


_NO_DEVICES = PodDevices()


@dataclass(frozen=True, slots=True)
class NodeDecision:
    """A node's answer for one pod.  ``devices`` and ``score`` are meaningful when ``fits``."""

    node: str
    fits: bool
    score: float = 0.0
    devices: PodDevices = _NO_DEVICES
    reason: str = ""
    mig: tuple[MigReservation, ...] = ()
    """The MIG instances to create, by container (init first) and NVIDIA device position."""


def decide_node(node: NodeUsage, plan: PodPlan) -> NodeDecision:
    """Fit every container of the pod on ``node`` (see the module doc)."""
    segments: dict[str, list[ContainerDevices]] = {word: [] for word in plan.vendors}
    work = list(node.devices)
    touched: set[str] = set()
    occupancy: Mapping[str, GpuOccupancy] = node.mig
    reservations: list[MigReservation] = []
    for container_index, slot in enumerate(plan.requests.slots):
        if not slot.requests:
            for taken in segments.values():
                taken.append(())
            continue
        # Init containers read the untouched node; app containers share ``work``.
        fitted = _fit_container(
            slot,
            node,
            plan,
            devices=node.devices if slot.is_init else work,
            touched=set() if slot.is_init else touched,
            segments=segments,
            occupancy=occupancy,
        )
        if isinstance(fitted, str):
            return NodeDecision(node=node.name, fits=False, reason=fitted)
        outcome, instances = fitted
        if instances:
            occupancy = _with_instances(occupancy, [choice for _, choice in instances])
            reservations.extend(
                choice.reservation(container_index, device_index)
                for device_index, choice in instances
            )
        if not slot.is_init:
            positions = node.layout.positions
            for word, granted in outcome.items():
                touched.add(word)
                for device in granted:
                    p = positions[device.uuid]
                    work[p] = work[p].shifted(1, device.usedmem, device.usedcores)
        for word, taken in segments.items():
            taken.append(outcome.get(word, ()))
    return NodeDecision(
        node=node.name,
        fits=True,
        score=node.base_score + _vendor_scores(node, plan, segments),
        devices=PodDevices(tuple((word, tuple(taken)) for word, taken in segments.items())),
        mig=tuple(reservations),
    )


def _with_instances(
    occupancy: Mapping[str, GpuOccupancy], choices: Sequence[MigChoice]
) -> dict[str, GpuOccupancy]:
    """``occupancy`` with the slices of ``choices`` held too (a new mapping)."""
    grown = dict(occupancy)
    for choice in choices:
        held = grown.get(choice.gpu_uuid, GpuOccupancy(choice.gpu_uuid))
        grown[choice.gpu_uuid] = held.with_held(
            HeldSlices("", choice.profile.name, choice.placement)
        )
    return grown


def _vendor_scores(
    node: NodeUsage, plan: PodPlan, segments: Mapping[str, Sequence[ContainerDevices]]
) -> float:
    """What the vendors with a node score of their own add (HAMi sums every vendor's)."""
    total = 0.0
    for word, taken in segments.items():
        score = strategy_for(word).score
        if score is not None:
            args = ScoreArgs(word, node, taken, plan.node_policy, _context(node, plan, word, ()))
            total += score(args)
    return total


def _context(
    node: NodeUsage, plan: PodPlan, word: str, earlier: Sequence[ContainerDevices]
) -> VendorContext:
    """The vendor context of ``word`` (only vendors with rules of their own read one)."""
    if strategy_for(word).standard:
        return NO_VENDOR_CONTEXT
    return vendor_context(
        word,
        plan.vendor,
        node.layout.vendor,
        node_name=node.name,
        earlier=earlier,
        sgpu_state=plan.sgpu_state,
    )


def decision_usage(decision: NodeDecision, plan: PodPlan) -> tuple[DeviceUsageSummary, ...]:
    """The usage a placed decision holds on its node (what the caches apply)."""
    return pod_usage(decision.devices, init_count=plan.requests.init_count)


def _fit_container(
    slot: ContainerSlot,
    node: NodeUsage,
    plan: PodPlan,
    *,
    devices: Sequence[DeviceUsage],
    touched: set[str],
    segments: dict[str, list[ContainerDevices]],
    occupancy: Mapping[str, GpuOccupancy],
) -> tuple[dict[str, ContainerDevices], list[tuple[int, MigChoice]]] | str:
    """Fit one container's requests on ``devices``; the reason text on failure.

    ``touched`` names the vendors whose devices in ``devices`` differ from ``node``'s; the MIG
    instances taken come back as ``(position in the container's device list, choice)``.
    """
    layout = node.layout
    requests = tuple(slot.requests.values())
    chosen: dict[str, ContainerDevices] = {}
    instances: list[tuple[int, MigChoice]] = []
    for word, request in slot.requests.items():
        positions = layout.vendor_positions.get(word, ())
        if request.nums > len(positions) and not layout.mig_gpus:
            return why.NODE_INSUFFICIENT_DEVICE
        selectors = plan.selectors_for(word)
        if word in touched:
            ordered = _order([devices[p] for p in positions], requests, plan, selectors)
        else:
            ordered = _node_order(node, word, requests, plan, selectors)
        quota = plan.quota_for(word)
        ctx = FitContext(
            selectors=selectors,
            mutex=plan.gpu_policy.mutex,
            topology=plan.gpu_policy.topology_aware,
            cordon=layout.cordon,
            pair_score=layout.pair_score,
            quota=None if quota is None else _quota_probe(quota, segments[word], plan),
            mig_gpus=layout.mig_gpus,
            mig=occupancy,
            vendor=_context(node, plan, word, segments[word]),
        )
        strategy = strategy_for(word)
        result = strategy.fit(ordered, request, ctx)
        if not result.ok:
            return result.reason
        if strategy.fit is not fit_request and not _within_quota(ctx.quota, result.devices):
            return why.format_reasons(
                {why.RESOURCE_QUOTA_NOT_FIT: len(result.devices)}, len(ordered)
            )
        chosen[word] = result.devices
        if result.instances:
            instances.extend(
                (position, choice)
                for position, choice in enumerate(result.instances)
                if choice is not None
            )
    return chosen, instances


def _order(
    group: Sequence[DeviceUsage],
    requests: Sequence[ContainerDeviceRequest],
    plan: PodPlan,
    selectors: DeviceSelectors,
) -> Sequence[DeviceUsage]:
    scores = [device_score(dev, requests, plan.weights) for dev in group]
    return sort_devices(group, scores, plan.gpu_policy, numa_bind=selectors.numa_bind)


def _node_order(
    node: NodeUsage,
    word: str,
    requests: Sequence[ContainerDeviceRequest],
    plan: PodPlan,
    selectors: DeviceSelectors,
) -> Sequence[DeviceUsage]:
    """The policy order of the node's own devices, kept per node version.

    Device scores count a request only when its type equals the device model (quirk Q2), which
    real requests (typed by vendor word) never do; then the order depends on the node alone and
    is computed once per node version, policy, numa-bind and weights.
    """
    models = node.derived(("models", word), lambda: {d.type for d in node.vendor_devices(word)})
    if any(request.type in models for request in requests):
        return _order(node.vendor_devices(word), requests, plan, selectors)
    key = ("order", word, plan.gpu_policy.entries, selectors.numa_bind, plan.weights)
    return node.derived(key, lambda: tuple(_order(node.vendor_devices(word), (), plan, selectors)))


def _within_quota(probe: QuotaProbe | None, devices: Sequence[ContainerDevice]) -> bool:
    """Whether a vendor fit's whole choice keeps the namespace quota.  The standard loop asks
    per device, as HAMi's does; a vendor's own fit has its own loop, so its choice is checked
    once, whole (a namespace quota is a total: another choice of devices rarely changes it)."""
    if probe is None or not devices:
        return True
    return probe(devices[:-1], devices[-1])


def _quota_probe(
    quota: VendorQuota, earlier: Sequence[ContainerDevices], plan: PodPlan
) -> QuotaProbe:
    """Does the pod so far, plus this container's devices and the candidate, fit the quota?"""
    init_count = plan.requests.init_count
    tally = PodQuotaTally(earlier, init_count=init_count)
    init = len(earlier) < init_count

    def probe(taken: Sequence[ContainerDevice], candidate: ContainerDevice) -> bool:
        memory, cores = tally.total_with((*taken, candidate), init=init)
        return quota.allows(memory, cores)

    return probe
