"""The scheduler-extender JSON (``k8s.io/kube-scheduler/extender/v1``) as kube-scheduler speaks it.

Requests are written with Go's field names (PascalCase, unset fields as ``null``); replies are read
case-insensitively, as Go's ``encoding/json`` does.  Interpretation of a filter reply follows
``HTTPExtender.Filter``: ``NodeNames`` when node-cache-capable and present, else ``Nodes.items``,
else nothing survives; every surviving name must be one that was sent.

The preempt verb (``ExtenderPreemptionArgs``) sends each candidate's victims as UIDs
(``NodeNameToMetaVictims``, ``Pods`` always a list) when node-cache-capable, else as full pods
(``NodeNameToVictims``, ``Pods`` ``null`` for a node without victims, as Go marshals a nil slice);
the reply is always ``NodeNameToMetaVictims``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_kube.objects import NodeView, PodView

__all__ = [
    "ExtenderError",
    "FilterOutcome",
    "MetaVictims",
    "binding_args",
    "extender_args",
    "parse_binding_result",
    "parse_filter_result",
    "parse_host_priorities",
    "parse_preemption_result",
    "preemption_args",
]


class ExtenderError(Exception):
    """An extender call failed: transport, HTTP status, bad JSON, or a non-empty ``Error``."""


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """Survivors of one extender filter call, in the extender's order, and why others failed."""

    survivors: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    failed_unresolvable: Mapping[str, str] = field(default_factory=dict)

    def reason_for(self, node: str) -> str | None:
        """The recorded reason (unresolvable wins over plain failure), if any."""
        return self.failed_unresolvable.get(node, self.failed.get(node))


def extender_args(
    pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], *, node_cache_capable: bool
) -> dict[str, Any]:
    """``ExtenderArgs`` for the filter and prioritize verbs."""
    if node_cache_capable:
        return {"Pod": pod, "Nodes": None, "NodeNames": [NodeView(node).name for node in nodes]}
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}


def binding_args(pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    """``ExtenderBindingArgs``."""
    view = PodView(pod)
    return {"PodName": view.name, "PodNamespace": view.namespace, "PodUID": view.uid, "Node": node}


def parse_filter_result(
    body: object, *, sent: Sequence[str], node_cache_capable: bool, url: str
) -> FilterOutcome:
    """Interpret an ``ExtenderFilterResult``; raise :class:`ExtenderError` on ``Error``."""
    if not isinstance(body, Mapping):
        raise ExtenderError(f"extender {url!r} returned a filter result that is not an object")
    reply = _lower_keys(body)
    error = reply.get("error")
    if error:
        raise ExtenderError(str(error))
    names = reply.get("nodenames")
    nodes = reply.get("nodes")
    if node_cache_capable and names is not None:
        survivors = _string_list(names, "NodeNames", url)
    elif nodes is not None:
        survivors = _node_list_names(nodes, url)
    else:
        survivors = []
    known = set(sent)
    for name in survivors:
        if name not in known:
            raise ExtenderError(
                f'extender "{url}" claims a filtered node "{name}" which is not found in the '
                "input node list"
            )
    return FilterOutcome(
        survivors=tuple(dict.fromkeys(survivors)),
        failed=_reason_map(reply.get("failednodes"), "FailedNodes", url),
        failed_unresolvable=_reason_map(
            reply.get("failedandunresolvablenodes"), "FailedAndUnresolvableNodes", url
        ),
    )


def parse_host_priorities(body: object, url: str) -> dict[str, int]:
    """A ``HostPriorityList`` (bare array of ``{Host, Score}``) as ``{host: score}``."""
    if body is None:
        return {}
    if not isinstance(body, list):
        raise ExtenderError(f"extender {url!r} returned priorities that are not an array")
    scores: dict[str, int] = {}
    for item in body:
        entry = _lower_keys(item) if isinstance(item, Mapping) else None
        host = entry.get("host") if entry else None
        score = entry.get("score") if entry else None
        if not isinstance(host, str) or isinstance(score, bool) or not isinstance(score, int):
            raise ExtenderError(f"extender {url!r} returned a malformed HostPriority {item!r}")
        scores[host] = score
    return scores


@dataclass(frozen=True, slots=True)
class MetaVictims:
    """One node of an ``ExtenderPreemptionResult``: victim UIDs and the PDB violations claimed."""

    uids: tuple[str, ...]
    num_pdb_violations: int = 0


def preemption_args(
    pod: Mapping[str, Any],
    victims: Mapping[str, tuple[Sequence[Mapping[str, Any]], int]],
    *,
    node_cache_capable: bool,
) -> dict[str, Any]:
    """``ExtenderPreemptionArgs`` for ``victims``: node -> (victim pods, PDB violations)."""
    if node_cache_capable:
        meta = {
            node: {
                "Pods": [{"UID": PodView(p).uid} for p in pods],
                "NumPDBViolations": violations,
            }
            for node, (pods, violations) in victims.items()
        }
        return {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
    full = {
        node: {"Pods": list(pods) or None, "NumPDBViolations": violations}
        for node, (pods, violations) in victims.items()
    }
    return {"Pod": pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": None}


def parse_preemption_result(body: object, url: str) -> dict[str, MetaVictims]:
    """An ``ExtenderPreemptionResult`` as node -> :class:`MetaVictims`, in the reply's order."""
    if body is None:
        return {}
    if not isinstance(body, Mapping):
        raise ExtenderError(f"extender {url!r} returned a preemption result that is not an object")
    raw = _lower_keys(body).get("nodenametometavictims")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ExtenderError(
            f"extender {url!r} returned NodeNameToMetaVictims that is not an object"
        )
    result: dict[str, MetaVictims] = {}
    for node, entry in raw.items():
        fields = _lower_keys(entry) if isinstance(entry, Mapping) else {}
        pods = [] if fields.get("pods") is None else fields["pods"]
        violations = 0 if fields.get("numpdbviolations") is None else fields["numpdbviolations"]
        if (
            not isinstance(pods, list)
            or isinstance(violations, bool)
            or not isinstance(violations, int)
        ):
            raise ExtenderError(f"extender {url!r} returned malformed victims for node {node!r}")
        uids = []
        for item in pods:
            uid = _lower_keys(item).get("uid") if isinstance(item, Mapping) else None
            if not isinstance(uid, str):
                raise ExtenderError(f"extender {url!r} returned a victim without a UID: {item!r}")
            uids.append(uid)
        result[str(node)] = MetaVictims(tuple(uids), violations)
    return result


def parse_binding_result(body: object, url: str) -> None:
    """Raise :class:`ExtenderError` when an ``ExtenderBindingResult`` carries an ``Error``."""
    if body is None:
        return
    if not isinstance(body, Mapping):
        raise ExtenderError(f"extender {url!r} returned a binding result that is not an object")
    error = _lower_keys(body).get("error")
    if error:
        raise ExtenderError(str(error))


def _node_list_names(nodes: object, url: str) -> list[str]:
    if not isinstance(nodes, Mapping):
        raise ExtenderError(f"extender {url!r} returned Nodes that is not a NodeList")
    items = _lower_keys(nodes).get("items") or []
    if not isinstance(items, list):
        raise ExtenderError(f"extender {url!r} returned Nodes.items that is not an array")
    names: list[str] = []
    for item in items:
        metadata = _lower_keys(item).get("metadata") if isinstance(item, Mapping) else None
        name = _lower_keys(metadata).get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str):
            raise ExtenderError(f"extender {url!r} returned a node without metadata.name")
        names.append(name)
    return names


def _reason_map(raw: object, key: str, url: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ExtenderError(f"extender {url!r} returned {key} that is not an object")
    return {str(node): str(reason) for node, reason in raw.items()}


def _string_list(raw: object, key: str, url: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ExtenderError(f"extender {url!r} returned {key} that is not an array of strings")
    return list(raw)


def _lower_keys(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {str(key).lower(): value for key, value in raw.items()}
