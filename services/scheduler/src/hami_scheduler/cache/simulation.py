"""Node objects given in a request, read against the cache: the autoscaler's simulation path.

:func:`simulate` builds a throw-away :class:`~hami_scheduler.core.joint.route.Fleet` from the
Node objects of a filter request (``nodeCacheCapable: false``), with the usage the cache knows
for those node names — what their pods hold, the pod being filtered left out — and changes
nothing in the cache.  :meth:`SchedulerCache.simulated
<hami_scheduler.cache.view.SchedulerCache.simulated>` calls it with the cache's own parts.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hami_kube.resources import JsonObject
from hami_protocol.vendor.table import Vendor
from hami_scheduler.cache.nics import NicCache
from hami_scheduler.cache.nodes import NodeFacts, read_node
from hami_scheduler.cache.pods import Holding
from hami_scheduler.cache.vendor_facts import node_vendor_facts
from hami_scheduler.core import NodeUsage, build_node_usage
from hami_scheduler.core.joint.nics import NicUsage
from hami_scheduler.core.joint.route import Fleet

__all__ = ["Simulation", "simulate"]


@dataclass(frozen=True, slots=True)
class Simulation:
    """Node objects from a request, read against the cache (:func:`simulate`)."""

    fleet: Fleet
    objects: Mapping[str, JsonObject]
    """Node name → the object as given, for the readable ones."""
    failed: Mapping[str, str]
    """Node name → why its object cannot be used (no name, a malformed register annotation)."""


def _unreadable(facts: NodeFacts, words: Collection[str] | None) -> str | None:
    """Why the node object cannot serve a pod asking vendors ``words`` (``None``: any vendor):
    no name, or bad input of one of those vendors (the node's other vendors stay usable)."""
    if not facts.name:
        return "node object has no name"
    for registration in facts.registrations:
        if registration.error and (words is None or registration.word in words):
            return registration.error
    return None


def simulate(
    objs: Iterable[JsonObject],
    *,
    vendors: Sequence[Vendor],
    held: Callable[[str], Mapping[str, Holding]],
    nic: NicCache,
    exclude_uid: str = "",
    words: Collection[str] | None = None,
) -> Simulation:
    """The nodes of Node objects given in a request, with the usage of the pods ``held`` on
    each name (UID → holding) and the NICs ``nic`` knows there, leaving out pod
    ``exclude_uid``; a node whose input for one of ``words`` (the pod's vendors; ``None``: any)
    is bad is failed."""
    gpus: dict[str, NodeUsage] = {}
    nics: dict[str, NicUsage] = {}
    objects: dict[str, JsonObject] = {}
    failed: dict[str, str] = {}
    for obj in objs:
        facts = read_node(obj, vendors)
        problem = _unreadable(facts, words)
        if problem is not None:
            failed[facts.name] = problem
            continue
        objects[facts.name] = obj
        devices = {r.word: r.devices for r in facts.registrations if r.devices}
        if devices:
            pods = held(facts.name)
            gpus[facts.name] = build_node_usage(
                facts.name,
                devices,
                cordon=facts.cordon,
                pair_scores=facts.pair_scores,
                usages=[
                    s for uid, holding in pods.items() if uid != exclude_uid for s in holding.usage
                ],
                mig=[m for uid, holding in pods.items() if uid != exclude_uid for m in holding.mig],
                vendor=node_vendor_facts(facts),
            )
        usage = nic.simulated(facts, exclude_uid=exclude_uid)
        if usage is not None:
            nics[facts.name] = usage
    claimed = {name for name, usage in nics.items() if usage.claims_gpus}
    return Simulation(Fleet(gpus, nics, claimed, objects), objects, failed)
