"""The extender JSON (``k8s.io/kube-scheduler/extender/v1``): decoding requests, encoding replies.

The Go types have no JSON tags, so kube-scheduler writes the Go field names (``Pod``,
``NodeNames``, ...) and reads replies case-insensitively.  As Go's ``encoding/json`` does, keys
are matched here without regard to case (``nodenames`` works; when a key appears in several
spellings the last one wins), ``null`` means "not set", and replies use the Go names with
every field present — unset ones as ``null``, never omitted.  Embedded Kubernetes objects
(``Pod``, the ``Nodes`` NodeList) keep their camelCase keys; only ``items`` of the NodeList is
looked up case-insensitively, as Go would.

Bodies that are not JSON, or whose fields have the wrong JSON type, raise :class:`BadArgsError`
(the HTTP layer answers 400); everything else decodes, and missing pieces are for the caller to
judge (a missing pod is an ``Error`` in the reply, not a decoding failure).

Preempt: ``ExtenderPreemptionArgs`` carries the candidate victims either as UIDs
(``NodeNameToMetaVictims``, ``nodeCacheCapable: true``) or as full pods (``NodeNameToVictims``);
both decode to :class:`PreemptionArgs`.  The reply, ``ExtenderPreemptionResult``, is always the
UID form; a failed call adds ``Error`` beside an empty map (kube-scheduler ignores the key and
reads "no candidate": nothing is evicted; the text is for logs and people).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import add
from typing import Any, Final

from hami_kube.resources import JsonObject

__all__ = [
    "BadArgsError",
    "BindingArgs",
    "ExtenderArgs",
    "OfferedPod",
    "OfferedVictims",
    "PreemptionArgs",
    "decode_binding_args",
    "decode_extender_args",
    "decode_preemption_args",
    "encode_binding_result",
    "encode_filter_result",
    "encode_preemption_result",
    "encode_priorities",
]


class BadArgsError(ValueError):
    """The body is not a decodable extender request."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter/prioritize arguments: the pod, and either node names or full node objects."""

    pod: JsonObject | None
    nodes: list[JsonObject] | None = None
    """``Nodes.items`` when the scheduler sent full objects (``nodeCacheCapable: false``)."""
    node_names: list[str] | None = None


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str = ""
    pod_namespace: str = ""
    pod_uid: str = ""
    node: str = ""


@dataclass(frozen=True, slots=True)
class OfferedPod:
    """A victim kube-scheduler's in-tree preemption chose."""

    uid: str
    pod: JsonObject | None = None
    """The full pod (``NodeNameToVictims``); ``None`` for a ``MetaPod``."""


@dataclass(frozen=True, slots=True)
class OfferedVictims:
    """One candidate node's ``Victims`` / ``MetaVictims``."""

    pods: tuple[OfferedPod, ...] = ()
    num_pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """``ExtenderPreemptionArgs``: the preemptor and the candidate nodes with their victims."""

    pod: JsonObject | None
    victims: Mapping[str, OfferedVictims]
    meta: bool
    """Whether the victims came as UIDs (``NodeNameToMetaVictims``)."""


def _load(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadArgsError(f"request body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadArgsError("request body must be a JSON object")
    return document


def _fields(document: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """Go's case-insensitive field matching: ``name → value`` for the known ``names``."""
    folded = {name.lower(): name for name in names}
    found: dict[str, Any] = {}
    for key, value in document.items():
        name = folded.get(key.lower())
        if name is not None:
            found[name] = value
    return found


def decode_extender_args(body: bytes) -> ExtenderArgs:
    """``ExtenderArgs`` from a filter or prioritize body; raises :class:`BadArgsError`."""
    fields = _fields(_load(body), ("Pod", "Nodes", "NodeNames"))
    pod = fields.get("Pod")
    if pod is not None and not isinstance(pod, dict):
        raise BadArgsError("Pod must be a JSON object or null")
    names = fields.get("NodeNames")
    # Thousands of names: the element check runs at C speed (json.loads makes exact strs).
    if names is not None and (not isinstance(names, list) or set(map(type, names)) - {str}):
        raise BadArgsError("NodeNames must be an array of strings or null")
    node_list = fields.get("Nodes")
    items: list[JsonObject] | None = None
    if node_list is not None:
        if not isinstance(node_list, dict):
            raise BadArgsError("Nodes must be a NodeList object or null")
        raw_items = _fields(node_list, ("items",)).get("items")
        if raw_items is None:
            items = []
        elif isinstance(raw_items, list) and all(isinstance(i, dict) for i in raw_items):
            items = raw_items
        else:
            raise BadArgsError("Nodes.items must be an array of Node objects")
    return ExtenderArgs(pod=pod, nodes=items, node_names=names)


def decode_binding_args(body: bytes) -> BindingArgs:
    """``ExtenderBindingArgs``; raises :class:`BadArgsError`."""
    fields = _fields(_load(body), ("PodName", "PodNamespace", "PodUID", "Node"))
    values: dict[str, str] = {}
    for name, value in fields.items():
        if value is None:
            continue
        if not isinstance(value, str):
            raise BadArgsError(f"{name} must be a string")
        values[name] = value
    return BindingArgs(
        pod_name=values.get("PodName", ""),
        pod_namespace=values.get("PodNamespace", ""),
        pod_uid=values.get("PodUID", ""),
        node=values.get("Node", ""),
    )


def decode_preemption_args(body: bytes) -> PreemptionArgs:
    """``ExtenderPreemptionArgs``; raises :class:`BadArgsError`."""
    fields = _fields(_load(body), ("Pod", "NodeNameToVictims", "NodeNameToMetaVictims"))
    pod = fields.get("Pod")
    if pod is not None and not isinstance(pod, dict):
        raise BadArgsError("Pod must be a JSON object or null")
    full, meta = fields.get("NodeNameToVictims"), fields.get("NodeNameToMetaVictims")
    if full is not None and meta is not None:
        # kube-scheduler sends one of them, by nodeCacheCapable; two could disagree.
        raise BadArgsError("NodeNameToVictims and NodeNameToMetaVictims are both set")
    if meta is not None:
        return PreemptionArgs(pod, _victims_map(meta, "NodeNameToMetaVictims"), meta=True)
    return PreemptionArgs(pod, _victims_map(full, "NodeNameToVictims"), meta=False)


def _victims_map(value: object, name: str) -> dict[str, OfferedVictims]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadArgsError(f"{name} must be an object or null")
    meta = name == "NodeNameToMetaVictims"
    decoded: dict[str, OfferedVictims] = {}
    for node, entry in value.items():
        where = f"{name}[{node!r}]"
        if not isinstance(entry, dict):
            raise BadArgsError(f"{where} must be an object")
        fields = _fields(entry, ("Pods", "NumPDBViolations"))
        pods = fields.get("Pods")
        if pods is None:
            pods = []
        if not isinstance(pods, list):
            raise BadArgsError(f"{where}.Pods must be an array or null")
        count = fields.get("NumPDBViolations")
        if count is None:
            count = 0
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise BadArgsError(f"{where}.NumPDBViolations must be a non-negative integer")
        offered = tuple(
            _offered(pod, f"{where}.Pods[{index}]", meta=meta) for index, pod in enumerate(pods)
        )
        decoded[node] = OfferedVictims(offered, count)
    return decoded


def _offered(value: object, where: str, *, meta: bool) -> OfferedPod:
    if not isinstance(value, dict):
        raise BadArgsError(f"{where} must be an object")
    if meta:
        uid = _fields(value, ("UID",)).get("UID")
        if not isinstance(uid, str) or not uid:
            raise BadArgsError(f"{where}.UID must be a non-empty string")
        return OfferedPod(uid)
    metadata = value.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    if not isinstance(uid, str) or not uid:
        raise BadArgsError(f"{where}.metadata.uid must be a non-empty string")
    return OfferedPod(uid, value)


def encode_preemption_result(
    victims: Mapping[str, tuple[Sequence[str], int]], *, error: str = ""
) -> bytes:
    """``ExtenderPreemptionResult``: node → victim UIDs (in the given order) and
    ``NumPDBViolations``; ``Error`` is added only for a failed call."""
    document: dict[str, object] = {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
            for node, (uids, violations) in victims.items()
        }
    }
    if error:
        document["Error"] = error
    return _dump(document)


def _dump(document: object) -> bytes:
    return _text(document).encode()


_QUOTE: Final = json.encoder.encode_basestring
"""A JSON string literal as ``json.dumps(..., ensure_ascii=False)`` writes it."""


def _text(document: object) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


_GROUPED_TEXTS: Final = 8
"""Up to this many distinct texts, :func:`_string_map` writes the names sharing a text in one
join."""


def _string_map(mapping: Mapping[str, str] | None) -> list[str]:
    """A ``{name: text}`` object as JSON, in pieces to join: what :func:`_text` writes, but
    with the entries grouped by text (texts in sorted order; names in the mapping's order).

    ``FailedNodes`` may name thousands of nodes, nearly all with one of a few reasons.
    ``json.dumps`` lists a dict's items as tuples first, and those thousands of short-lived
    tracked objects per filter set off garbage collections (a vendor pod refused by 4,700
    nodes: three gen-0 collections per filter, and gen-2 pauses of up to 25 ms in the p99);
    writing each entry as a string of its own costs an allocation per node.  Here the names
    sharing a text are joined at once — names that need no JSON escaping (Kubernetes names
    never do) are joined as they are — so no Python code runs per node, and the pieces are
    joined once with the rest of the reply (every copy of a 200 kB text is a fresh allocation
    the kernel may have to fault in).  Kube-scheduler reads the object into a map, so the order
    of its entries means nothing."""
    if mapping is None:
        return ["null"]
    names, texts = mapping.keys(), mapping.values()
    distinct = sorted(set(texts))
    if len(distinct) > _GROUPED_TEXTS:
        quoted = {text: ":" + _QUOTE(text) for text in distinct}
        entries = map(add, map(_QUOTE, names), map(quoted.__getitem__, texts))
        return ["{", ",".join(entries), "}"]
    plain = _needs_no_escape("".join(names))
    parts = ["{"]
    for text in distinct:
        members = names if len(distinct) == 1 else compress(names, map(text.__eq__, texts))
        value = _QUOTE(text)
        if len(parts) > 1:
            parts.append(",")
        if plain:
            parts += ('"', ('":' + value + ',"').join(members), '":', value)
        else:
            parts += ((":" + value + ",").join(map(_QUOTE, members)), ":", value)
    parts.append("}")
    return parts


def _needs_no_escape(text: str) -> bool:
    """Whether JSON writes ``text`` between quotes as it is (no quote, backslash or control
    character), checked at C speed."""
    return len(_QUOTE(text)) == len(text) + 2


def encode_filter_result(
    *,
    node_names: Sequence[str] | None = None,
    nodes: Sequence[JsonObject] | None = None,
    failed: Mapping[str, str] | None = None,
    failed_unresolvable: Mapping[str, str] | None = None,
    error: str = "",
) -> bytes:
    """``ExtenderFilterResult`` with every field present (``null`` when unset)."""
    listed = None if nodes is None else {"metadata": {}, "items": list(nodes)}
    names = None if node_names is None else list(node_names)
    return "".join(
        [
            f'{{"Nodes":{_text(listed)},"NodeNames":{_text(names)},"FailedNodes":',
            *_string_map(failed),
            ',"FailedAndUnresolvableNodes":',
            *_string_map(failed_unresolvable),
            f',"Error":{_text(error)}}}',
        ]
    ).encode()


def encode_priorities(scores: Sequence[tuple[str, int]]) -> bytes:
    """``HostPriorityList``: a bare JSON array of ``{"Host", "Score"}``."""
    return _dump([{"Host": host, "Score": score} for host, score in scores])


def encode_binding_result(error: str = "") -> bytes:
    return _dump({"Error": error})
