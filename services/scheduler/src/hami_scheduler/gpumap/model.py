"""The map document (``GET api/v1/map``): node → card → the pods holding it, from the cache.

Every card comes through the scheduler's one decoder — the registrations the cache read
(:class:`~hami_scheduler.cache.nodes.NodeFacts`) and the usage the filter reads
(:attr:`SchedulerCache.nodes <hami_scheduler.cache.view.SchedulerCache.nodes>`) — so the map
cannot disagree with a decision.  Nothing is hidden:

* a vendor the scheduler handles and may place on: its cards with the usage the filter sees;
* a vendor marked unavailable (handshake, capacity): its cards as registered, ``schedulable``
  false, the reason in the node's ``problems``, holders still listed;
* a register annotation that does not decode: in the node's ``unreadable`` list, raw (bounded);
* a register-like annotation of a vendor this scheduler does not handle
  (:attr:`NodeFacts.foreign <hami_scheduler.cache.nodes.NodeFacts.foreign>`): decoded with the
  generic register codec when it reads, its cards shown with ``raw`` naming the annotation
  (never scheduled on, no holders known), else raw in ``unreadable``.

Holders are the pods whose holdings count on the node (bound, or decided here and not yet
bound: ``assumed``), one entry per pod and card with what counts for it (init containers by
their peak, HAMi's rule); ``container`` names the positions of the containers the pod's
allocation annotation lists on that card (init containers first) — container names are not
kept in the cache.

DRA-managed GPUs (:mod:`.dra`): a node with cards in this driver's ResourceSlices is listed
even without a register annotation; its DRA cards follow its HAMi cards (``mode: "dra"``,
never schedulable by this extender) and their figures are summed apart (``dra`` blocks), so
the extender's free capacity and fragmentation stay what ``/filter`` can place on.

Cost: nodes are filtered and counted on their remembered summaries
(:func:`~.summary.node_summary`), O(nodes); holders are read for the page's nodes only.  The
server builds the document in steps (:func:`map_document_steps`, :mod:`.steps`), so that a
filter never waits for a whole page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, Final, Protocol

from hami_kube.timefmt import format_time
from hami_protocol.errors import ProtocolError
from hami_protocol.node.handshake import parse_handshake
from hami_protocol.node.registry import decode_node_devices
from hami_scheduler.cache.holdings import Resident
from hami_scheduler.cache.nodes import NodeFacts
from hami_scheduler.core import DeviceUsage, NodeUsage
from hami_scheduler.core.usage.device import device_usage
from hami_scheduler.gpumap.dra.document import (
    dra_card,
    dra_pools,
    dra_state,
    dra_summary,
    wanted_cards,
)
from hami_scheduler.gpumap.dra.join import UNWATCHED, DraCard, DraView
from hami_scheduler.gpumap.query import DEFAULT_PAGE, Page, document, flag, page_of, text
from hami_scheduler.gpumap.steps import Steps, drain
from hami_scheduler.gpumap.summary import Summary, add, card_free, node_summary

__all__ = ["CHUNK", "MAX_RAW", "MapQuery", "MapSource", "map_document", "map_document_steps"]
MAX_RAW: Final = 4096
"""The longest raw annotation value shown (the rest is cut, ``truncated`` says so)."""
CHUNK: Final = 500
"""Nodes read or summed per step of :func:`map_document_steps` (a fraction of a millisecond)."""


class MapSource(Protocol):
    """What the map reads of :class:`~hami_scheduler.cache.view.SchedulerCache`."""

    @property
    def nodes(self) -> Mapping[str, NodeUsage]: ...

    def node_names(self) -> list[str]: ...

    def facts(self, name: str) -> NodeFacts | None: ...

    def unhealthy(self, name: str) -> frozenset[str]: ...

    def node_problem(self, name: str, words: Iterable[str]) -> str | None: ...

    def residents(self, node: str) -> list[Resident]: ...


@dataclass(frozen=True, slots=True)
class MapQuery:
    node: str = ""
    """Case-insensitive substring of the node name."""
    vendor: str = ""
    """Case-insensitive substring of a card's vendor word or type: only such cards count."""
    fragmented: bool = False
    page: Page = DEFAULT_PAGE

    @classmethod
    def read(cls, query: Mapping[str, str]) -> MapQuery:
        return cls(
            text(query, "node").lower(),
            text(query, "vendor").lower(),
            flag(query, "fragmented"),
            Page.read(query),
        )

    def wants(self, device: DeviceUsage) -> bool:
        wanted = self.vendor
        return not wanted or wanted in device.vendor.lower() or wanted in device.type.lower()


def _listed(facts: NodeFacts | None) -> bool:
    return facts is not None and bool(facts.registrations or facts.foreign)


def _summary(source: MapSource, name: str, query: MapQuery) -> Summary:
    usage = source.nodes.get(name)
    if usage is None:
        return Summary()
    if not query.vendor:
        return node_summary(usage)
    # Remembered per node version and filter text (a page polled with one filter stays cheap).
    return usage.derived(("gpumap", query.vendor), lambda: node_summary(usage, query.wants))


def _capacity(summary: Summary, *, cluster: bool) -> dict[str, Any]:
    memory = {
        "total": summary.total_memory,
        "allocated": summary.allocated_memory,
        "free": summary.free_memory,
        "largestFree": summary.largest_memory,
    }
    cores = {
        "total": summary.total_cores,
        "allocated": summary.allocated_cores,
        "free": summary.free_cores,
        "largestFree": summary.largest_cores,
    }
    if cluster:
        return {"memory": memory, "cores": cores}
    return {
        "free": {
            "memory": summary.free_memory,
            "largestMemory": summary.largest_memory,
            "cores": summary.free_cores,
            "largestCores": summary.largest_cores,
        },
        "memory": memory,
        "cores": cores,
    }


def map_document(
    source: MapSource,
    query: MapQuery,
    *,
    now: datetime,
    replica: Mapping[str, Any],
    dra: DraView = UNWATCHED,
) -> dict[str, Any]:
    """The ``GpuMap`` document (docs/gpumap.md), built at once."""
    return drain(map_document_steps(source, query, now=now, replica=replica, dra=dra))


def map_document_steps(
    source: MapSource,
    query: MapQuery,
    *,
    now: datetime,
    replica: Mapping[str, Any],
    dra: DraView = UNWATCHED,
) -> Steps[dict[str, Any]]:
    """:func:`map_document` in steps (:mod:`.steps`): one per :data:`CHUNK` nodes read or
    summed, and one per node of the page.

    The server lets a filter run between two steps.  Each node's entry is read in one step, so
    its figures and its cards agree; the cluster figures and the node list are read a chunk at
    a time, so while decisions are being made they may count a pod moved during the build on
    neither or both of its nodes — as any view of a changing cluster, and never in a quiet one.
    """
    selected: list[tuple[str, Summary]] = []
    usages = source.nodes
    dra_nodes = dra.by_node
    dra_total = Summary()
    for index, name in enumerate(source.node_names(), 1):
        if index % CHUNK == 0:
            yield
        if query.node and query.node not in name.lower():
            continue
        cards = wanted_cards(dra_nodes.get(name), query.vendor)
        if cards:
            dra_total = add((dra_total, dra_summary(cards)))
        usage = usages.get(name)
        if usage is not None and not query.vendor:
            # The common case (a registered node, no vendor filter): one remembered summary.
            selected.append((name, node_summary(usage)))
            continue
        facts = source.facts(name)
        summary = _summary(source, name, query) if _listed(facts) else None
        hami = summary is not None and (
            not query.vendor or summary.devices > 0 or _foreign_match(facts, query)
        )
        if hami or cards:
            selected.append((name, summary or Summary()))
    # DRA nodes the cache does not hold (outside --node-label-selector, or not seen yet).
    for name in sorted(dra_nodes):
        if source.facts(name) is not None or (query.node and query.node not in name.lower()):
            continue
        cards = wanted_cards(dra_nodes[name], query.vendor)
        if cards:
            dra_total = add((dra_total, dra_summary(cards)))
            selected.append((name, Summary()))
    cluster = Summary()
    for start in range(0, len(selected), CHUNK):
        cluster = add((cluster, add(summary for _, summary in selected[start : start + CHUNK])))
        yield
    counted = len(selected)
    if query.fragmented:
        selected = [(name, summary) for name, summary in selected if summary.fragmented]
    selected.sort(key=itemgetter(0))
    shown, page = page_of(selected, query.page)
    doc = document("GpuMap", now, replica)
    doc["cluster"] = {
        "nodes": counted,
        "devices": cluster.devices,
        **_capacity(cluster, cluster=True),
        "fragmented": cluster.fragmented,
        "referenceRequest": {"memory": cluster.reference},
        "dra": _capacity(dra_total, cluster=True) | {"devices": dra_total.devices},
    }
    doc["dra"] = dra_state(dra)
    doc["page"] = page
    nodes: list[dict[str, Any]] = []
    for name, _ in shown:
        # Its summary read again beside its cards: a filter may have changed it since.
        cards = wanted_cards(dra_nodes.get(name), query.vendor)
        nodes.append(_node(source, name, _summary(source, name, query), query, cards))
        yield
    doc["nodes"] = nodes
    return doc


def _foreign_match(facts: NodeFacts | None, query: MapQuery) -> bool:
    return facts is not None and any(query.vendor in key.lower() for key, _ in facts.foreign)


def _raw(key: str, value: str, *, vendor: str | None, error: str | None) -> dict[str, Any]:
    return {
        "key": key,
        "vendor": vendor,
        "error": error,
        "value": value[:MAX_RAW],
        "truncated": len(value) > MAX_RAW,
    }


def _foreign_word(key: str) -> str:
    """``hami.io/node-foo-register`` → ``foo``; ``hami.io/node-register-foo`` → ``foo``."""
    middle = key.removeprefix("hami.io/node-")
    return middle.replace("register", "").strip("-") or middle


def _node(
    source: MapSource, name: str, summary: Summary, query: MapQuery, dra: Sequence[DraCard]
) -> dict[str, Any]:
    facts = source.facts(name) or NodeFacts(name)
    usage = source.nodes.get(name)
    marked = source.unhealthy(name)
    holders = _holders(source.residents(name))
    devices: list[dict[str, Any]] = []
    unreadable: list[dict[str, Any]] = []
    problems: list[str] = []
    placed = {} if usage is None else {d.uuid: d for d in usage.devices}
    cordon = facts.cordon
    for registration in facts.registrations:
        word = registration.word
        if registration.error:
            problems.append(registration.error)
            unreadable.append(
                _raw(registration.key, registration.raw, vendor=word, error=registration.error)
            )
            continue
        if word in marked:
            problem = source.node_problem(name, [word])
            if problem:
                problems.append(problem)
        for info in registration.devices:
            device = placed.get(info.id)
            usable = device is not None
            if device is None:
                device = _counted(device_usage(info, word), holders.get(info.id, ()))
            if query.wants(device):
                devices.append(_device(device, holders.get(info.id, ()), cordon, usable))
    for key, value in facts.foreign:
        devices_of, error = _decode_foreign(key, value)
        if error is not None:
            unreadable.append(_raw(key, value, vendor=None, error=error))
            continue
        for device in devices_of:
            if query.wants(device) or query.vendor in key.lower():
                shown = _device(device, (), cordon, False)
                shown["raw"] = {"key": key, "note": "vendor not handled by this scheduler"}
                devices.append(shown)
    handshake = next((value for value in facts.handshakes.values() if value), None)
    reported = parse_handshake(handshake).timestamp if handshake else None
    entry: dict[str, Any] = {
        "name": name,
        "registeredAt": format_time(reported) if reported is not None else None,
        "handshake": handshake,
        "health": _health(facts, usage, problems),
        "problems": problems,
        "vendors": [r.word for r in facts.registrations],
        **_capacity(summary, cluster=False),
        "fragmented": summary.fragmented,
        "devices": [*devices, *map(dra_card, dra)],
    }
    if dra:
        entry["dra"] = _capacity(dra_summary(dra), cluster=True) | {
            "devices": len(dra),
            "pools": dra_pools(dra),
        }
        if not facts.registrations and not facts.foreign:
            entry["health"] = "Healthy"
    if unreadable:
        entry["unreadable"] = unreadable
    return entry


def _health(facts: NodeFacts, usage: NodeUsage | None, problems: Sequence[str]) -> str:
    if not facts.registrations:
        return "Unregistered"
    if problems or usage is None:
        return "Unhealthy"
    return "Healthy"


def _decode_foreign(key: str, value: str) -> tuple[list[DeviceUsage], str | None]:
    try:
        infos = decode_node_devices(value, key=key)
    except (ProtocolError, ValueError, RecursionError, TypeError) as exc:
        reason = exc.reason if isinstance(exc, ProtocolError) else type(exc).__name__
        return [], f"not in the register format: {reason}"
    word = _foreign_word(key)
    return [device_usage(info, word) for info in infos], None


@dataclass(frozen=True, slots=True)
class _Holder:
    uid: str
    namespace: str
    pod: str
    container: str
    memory: int
    cores: int
    slots: int
    priority: int | None


def _positions(resident: Resident) -> dict[str, str]:
    """Card UUID → the positions of the containers the pod's annotation lists on it."""
    found: dict[str, list[int]] = {}
    for _, per_container in resident.holding.pod_devices().entries:
        for position, granted in enumerate(per_container):
            for device in granted:
                at = found.setdefault(device.uuid, [])
                if position not in at:
                    at.append(position)
    return {uuid: ",".join(map(str, at)) for uuid, at in found.items()}


def _holders(residents: Iterable[Resident]) -> dict[str, list[_Holder]]:
    by_card: dict[str, list[_Holder]] = {}
    for resident in residents:
        positions: dict[str, str] | None = None
        for held in resident.holding.usage:
            if positions is None:
                positions = _positions(resident)
            by_card.setdefault(held.uuid, []).append(
                _Holder(
                    resident.uid,
                    resident.namespace,
                    resident.name,
                    positions.get(held.uuid, ""),
                    held.usedmem,
                    held.usedcores,
                    held.slots,
                    resident.priority,
                )
            )
    for holders in by_card.values():
        holders.sort(key=lambda h: (h.namespace, h.pod))
    return by_card


def _counted(device: DeviceUsage, holders: Sequence[_Holder]) -> DeviceUsage:
    """An unplaceable card's usage, from what its holders hold."""
    if not holders:
        return device
    return device.shifted(
        sum(h.slots for h in holders),
        sum(h.memory for h in holders),
        sum(h.cores for h in holders),
    )


_MODES: Final[Mapping[str, str]] = {"": "hami-core"}


def _device(
    device: DeviceUsage, holders: Sequence[_Holder], cordon: frozenset[str], usable: bool
) -> dict[str, Any]:
    cordoned = device.uuid in cordon
    free_mem, free_cores = card_free(device, cordoned) if usable else (0, 0)
    return {
        "id": device.uuid,
        "index": device.index,
        "vendor": device.vendor,
        "type": device.type,
        "mode": _MODES.get(device.mode, device.mode),
        "health": device.health,
        "cordoned": cordoned,
        "schedulable": usable and device.health and not cordoned,
        "numa": device.numa,
        "memory": {"total": device.totalmem, "allocated": device.usedmem, "free": free_mem},
        "cores": {"total": device.totalcore, "allocated": device.usedcores, "free": free_cores},
        "shares": {"total": device.count, "used": device.used},
        "holders": [_holder(h) for h in holders],
        "usage": None,
    }


def _holder(holder: _Holder) -> dict[str, Any]:
    return {
        "namespace": holder.namespace,
        "pod": holder.pod,
        "container": holder.container,
        "uid": holder.uid,
        "memory": holder.memory,
        "cores": holder.cores,
        "priority": holder.priority,
        "assumed": holder.priority is None,
        "usage": None,
    }
