"""Candidate GPU sets for topology-aware placement, most compact first, at most a bounded number.

The joint search (:mod:`.joint`) runs HAMi's GPU fit once per candidate set, restricted to that
set's GPUs, and keeps the first candidate whose NICs also fit well.  The candidates, in order:

1. every PCIe switch alone;
2. per NUMA node: the growing unions of its switches (two, three, … in switch order), then the
   whole NUMA node (which adds its GPUs of unknown switch);
3. the growing unions of all switches in NUMA order then switch order, then every GPU.

A ``requiredTopologyScope`` stops the list early: ``PCIe`` after (1), ``NUMANode`` after (2);
``Device`` lists single GPUs instead.  Switches are ordered as Koordinator's GPU topology tree
prefers them: scopes that already hold allocations first (the switch and its NUMA node each count
one, so a busy switch on a busy NUMA node comes first — bin-packing keeps whole switches free for
large jobs), then by NUMA node, then by switch id.  NUMA nodes likewise: busy first, then by id.

Duplicates are dropped.  On a node with ``s`` switches and ``m`` NUMA nodes the list holds at most
``3s + m + 1`` sets (a 16-GPU, 8-switch node: at most 27), and never more than
:data:`MAX_GPU_SETS`; so one pod costs at most that many restricted fits per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from hami_protocol.topology.koordinator import TopologyScope

__all__ = ["MAX_GPU_SETS", "GpuPlace", "gpu_sets"]

MAX_GPU_SETS: Final = 64


@dataclass(frozen=True, slots=True)
class GpuPlace:
    """One GPU as the search sees it."""

    uuid: str
    switch: str
    """PCIe switch; ``""`` when unknown."""
    numa: int
    busy: bool
    """Some pod holds part of it (counts for the bin-packing order)."""
    eligible: bool = True
    """May be given to this pod (others only count for the order)."""


def gpu_sets(
    places: Sequence[GpuPlace], *, widest: TopologyScope = TopologyScope.NODE
) -> tuple[frozenset[str], ...]:
    """The candidate sets of eligible GPU UUIDs, in the order to try them (see the module doc)."""
    switch_numa: dict[str, int] = {}
    busy_switches: set[str] = set()
    busy_numas: set[int] = set()
    for place in places:
        if place.switch:
            switch_numa.setdefault(place.switch, place.numa)
        if place.busy:
            busy_numas.add(place.numa)
            if place.switch:
                busy_switches.add(place.switch)

    def numa_key(numa: int) -> tuple[int, int]:
        return (-(numa in busy_numas), numa)

    def switch_key(switch: str) -> tuple[int, int, str]:
        numa = switch_numa[switch]
        return (-((switch in busy_switches) + (numa in busy_numas)), numa, switch)

    eligible = [place for place in places if place.eligible]
    switches = sorted(switch_numa, key=switch_key)
    members = {s: frozenset(p.uuid for p in eligible if p.switch == s) for s in switches}
    found: dict[frozenset[str], None] = {}

    def add(candidates: Iterable[frozenset[str]]) -> None:
        for candidate in candidates:
            if candidate and len(found) < MAX_GPU_SETS:
                found.setdefault(candidate, None)

    if widest is TopologyScope.DEVICE:
        rank = {s: i for i, s in enumerate(switches)}
        singles = sorted(eligible, key=lambda p: rank.get(p.switch, len(rank)))
        add(frozenset((p.uuid,)) for p in singles)
        return tuple(found)
    add(members[s] for s in switches)
    if widest is TopologyScope.PCIE:
        return tuple(found)
    numas = sorted({p.numa for p in places}, key=numa_key)
    for numa in numas:
        local = [s for s in switches if switch_numa[s] == numa]
        add(_unions(local, members))
        add([frozenset(p.uuid for p in eligible if p.numa == numa)])
    if widest is TopologyScope.NUMA_NODE:
        return tuple(found)
    rank_numa = {numa: i for i, numa in enumerate(numas)}
    across = sorted(switches, key=lambda s: (rank_numa[switch_numa[s]], switch_key(s)))
    add(_unions(across, members))
    add([frozenset(p.uuid for p in eligible)])
    return tuple(found)


def _unions(
    switches: Sequence[str], members: dict[str, frozenset[str]]
) -> Iterable[frozenset[str]]:
    """The unions of the first 2, 3, … switches."""
    union: frozenset[str] = frozenset()
    for count, switch in enumerate(switches, start=1):
        union |= members[switch]
        if count >= 2:
            yield union
