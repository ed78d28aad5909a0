"""kube-scheduler's in-tree filters that matter here, as pure functions over pod and node views.

In the order kube-scheduler runs them, stopping at the first that rejects a node:
``NodeUnschedulable`` (``spec.unschedulable``), ``TaintToleration`` (NoSchedule/NoExecute),
``NodeAffinity`` (``nodeSelector`` and required node affinity), ``NodeResourcesFit`` (cpu, memory,
ephemeral storage, pod count and extended resources against allocatable minus what the node's pods
request, skipping ignored resources).  Also the effective request of a pod and host selection.

Each rejection carries kube-scheduler's status code (:mod:`.statuses`): the first three filters
return UnschedulableAndUnresolvable, as upstream; ``NodeResourcesFit`` returns Unschedulable unless
some request exceeds the node's whole allocatable (no preemption could free that much), then
UnschedulableAndUnresolvable, as current ``fit.go`` does.

Not modelled: host ports, volumes, pod (anti-)affinity and topology spread.  A node whose
allocatable has no ``pods`` entry is treated as having no pod-count limit.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_kube.objects import ContainerView, NodeView, PodView
from hami_kubesim.objects.quantities import read_quantity
from hami_kubesim.scheduler.statuses import Code, NodeStatus, unresolvable
from hami_protocol.errors import ProtocolError, RequestError
from hami_protocol.request.quantity import to_int_ceil, to_milli
from hami_protocol.selectors import Operator, requirement

__all__ = [
    "NO_NODES_AVAILABLE",
    "RequestedOnNode",
    "ResourceParseError",
    "filter_node",
    "node_allocatable",
    "node_selector_matches",
    "pod_requests",
    "select_host",
    "tolerates",
]

NO_NODES_AVAILABLE = "no nodes available to schedule pods"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"

_CPU = "cpu"
_PODS = "pods"
_UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_NODE_SELECTOR_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
    "Gt": Operator.GREATER_THAN,
    "Lt": Operator.LESS_THAN,
}

Resources = Mapping[str, int]
"""Resource name -> amount in base units (cpu in millicores, the rest rounded up)."""


class ResourceParseError(ValueError):
    """A resource quantity that does not parse; names where it was found and the value."""

    def __init__(self, where: str, value: object) -> None:
        super().__init__(f"{where}: invalid quantity {value!r}")
        self.where = where
        self.value = value


@dataclass(frozen=True, slots=True)
class RequestedOnNode:
    """What the pods bound (or assumed) to a node request, and how many there are."""

    requested: Mapping[str, int] = field(default_factory=dict)
    pod_count: int = 0

    def plus(self, requests: Resources) -> RequestedOnNode:
        total = dict(self.requested)
        for name, amount in requests.items():
            total[name] = total.get(name, 0) + amount
        return RequestedOnNode(requested=total, pod_count=self.pod_count + 1)


def pod_requests(pod: PodView) -> dict[str, int]:
    """The pod's effective request, as kube-scheduler computes it.

    Containers add up; each ordinary init container runs alone (beside the sidecars started before
    it), so the pod needs the maximum of those and the sum; restartable init containers (sidecars)
    also add to the running total; ``spec.overhead`` is added.  A resource with a limit and no
    request counts the limit, as the API server's defaulting would have set it.
    """
    total: dict[str, int] = {}
    for container in pod.containers:
        _add(total, _container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in pod.init_containers:
        requests = _container_requests(container)
        if container.restart_policy == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            running = dict(sidecars)
        else:
            running = dict(sidecars)
            _add(running, requests)
        _max(init_peak, running)
    _max(total, init_peak)
    overhead = pod.spec.get("overhead")
    _add(total, _quantities(overhead if isinstance(overhead, Mapping) else {}, "spec.overhead"))
    return total


def node_allocatable(node: NodeView) -> dict[str, int]:
    """``status.allocatable`` in base units."""
    return _quantities(node.allocatable, f"node {node.name} status.allocatable")


def filter_node(
    pod: PodView,
    requests: Resources,
    node: NodeView,
    usage: RequestedOnNode,
    *,
    ignored_resources: frozenset[str] = frozenset(),
    ignored_resource_groups: frozenset[str] = frozenset(),
) -> NodeStatus | None:
    """The status the in-tree filters give ``node`` for ``pod`` (``None``: it fits)."""
    tolerations = pod.spec.get("tolerations") or []
    if node.unschedulable and not tolerates(
        tolerations, {"key": _UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    ):
        return unresolvable(REASON_UNSCHEDULABLE)
    for taint in node.spec.get("taints") or []:
        if taint.get("effect") in _FILTERED_EFFECTS and not tolerates(tolerations, taint):
            key, value = taint.get("key", ""), taint.get("value", "")
            return unresolvable(f"node(s) had untolerated taint {{{key}: {value}}}")
    if not matches_node_affinity(pod, node):
        return unresolvable(REASON_AFFINITY)
    return _insufficient(
        requests,
        node,
        usage,
        ignored_resources=ignored_resources,
        ignored_resource_groups=ignored_resource_groups,
    )


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether any toleration matches ``taint`` (``ToleratesTaint``)."""
    return any(_toleration_matches(toleration, taint) for toleration in tolerations)


def matches_node_affinity(pod: PodView, node: NodeView) -> bool:
    """``nodeSelector`` and ``requiredDuringSchedulingIgnoredDuringExecution`` both hold."""
    spec = pod.spec
    labels = node.labels
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return required is None or node_selector_matches(required, node)


def node_selector_matches(selector: Mapping[str, Any] | None, node: NodeView) -> bool:
    """Whether a ``v1.NodeSelector`` (ORed ``nodeSelectorTerms``) selects ``node``; ``None``
    selects every node (DRA slices, devices and allocations carry such selectors)."""
    if selector is None:
        return True
    fields = {"metadata.name": node.name}
    return any(
        _term_matches(term or {}, node.labels, fields)
        for term in selector.get("nodeSelectorTerms") or []
    )


def select_host(scores: Mapping[str, int], rng: random.Random | None = None) -> str:
    """The highest-scoring node; ties go to ``rng`` (kube-scheduler picks at random) or, without
    one, to the alphabetically first name so runs are reproducible."""
    if not scores:
        raise ValueError("select_host needs at least one node")
    best = max(scores.values())
    candidates = sorted(name for name, score in scores.items() if score == best)
    return rng.choice(candidates) if rng is not None else candidates[0]


def _insufficient(
    requests: Resources,
    node: NodeView,
    usage: RequestedOnNode,
    *,
    ignored_resources: frozenset[str],
    ignored_resource_groups: frozenset[str],
) -> NodeStatus | None:
    allocatable = node_allocatable(node)
    reasons: list[str] = []
    code = Code.UNSCHEDULABLE
    if _PODS in allocatable and usage.pod_count + 1 > allocatable[_PODS]:
        reasons.append(REASON_TOO_MANY_PODS)
    for name in sorted(requests, key=_resource_order):
        amount = requests[name]
        if amount <= 0 or name == _PODS:
            continue
        if _is_extended(name) and (
            name in ignored_resources or name.split("/", 1)[0] in ignored_resource_groups
        ):
            continue
        free = allocatable.get(name, 0) - usage.requested.get(name, 0)
        if amount > free:
            reasons.append(f"Insufficient {name}")
            if amount > allocatable.get(name, 0):
                code = Code.UNRESOLVABLE  # the whole node is too small: preemption cannot help
    return NodeStatus(code, tuple(reasons)) if reasons else None


def _is_extended(name: str) -> bool:
    # Only extended resources (domain-prefixed, outside kubernetes.io) can be ignored.
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _resource_order(name: str) -> tuple[int, str]:
    # cpu, memory, ephemeral-storage first (kube-scheduler's check order), then the rest by name.
    native = ("cpu", "memory", "ephemeral-storage")
    return (native.index(name), "") if name in native else (len(native), name)


def _toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def _term_matches(
    term: Mapping[str, Any], labels: Mapping[str, str], fields: Mapping[str, str]
) -> bool:
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # an empty term selects no node
    return all(_requirement_matches(r, labels) for r in expressions) and all(
        _requirement_matches(r, fields) for r in field_expressions
    )


def _requirement_matches(raw: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    name = raw.get("operator")
    operator = _NODE_SELECTOR_OPERATORS.get(name) if isinstance(name, str) else None
    if operator is None:
        return False  # an unknown operator never matches
    try:
        compiled = requirement(
            str(raw.get("key") or ""), operator, [str(v) for v in raw.get("values") or []]
        )
    except ProtocolError:
        return False  # kube-scheduler skips a term it cannot parse: it selects no node
    return compiled.matches(values)


def _container_requests(container: ContainerView) -> dict[str, int]:
    merged = dict(container.limits)
    merged.update(container.requests)
    where = f"container {container.name or '?'} resources"
    return _quantities(merged, where)


def _quantities(raw: Mapping[str, Any], where: str) -> dict[str, int]:
    result: dict[str, int] = {}
    for name, value in raw.items():
        try:
            quantity = read_quantity(value, key=f"{where}.{name}")
        except RequestError as exc:
            raise ResourceParseError(f"{where}.{name}", value) from exc
        # kube-scheduler counts cpu with MilliValue() and everything else with Value().
        result[str(name)] = to_milli(quantity) if name == _CPU else to_int_ceil(quantity)
    return result


def _add(total: dict[str, int], extra: Mapping[str, int]) -> None:
    for name, amount in extra.items():
        total[name] = total.get(name, 0) + amount


def _max(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        total[name] = max(total.get(name, 0), amount)
