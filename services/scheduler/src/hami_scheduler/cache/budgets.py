"""PodDisruptionBudgets as kube-scheduler's preemption reads them, and which victims would break
one.

:class:`DisruptionBudgets` keeps, per namespace, each budget's selector, ``status.
disruptionsAllowed`` and ``status.disruptedPods`` (fed by the ``policy/v1`` watch).
:meth:`DisruptionBudgets.violating` is kube-scheduler's ``filterPodsWithPDBViolation``
(contract ``preemption-and-capacity.md`` §1.3 step 5), over pods given most important first:

* a pod without labels matches no budget;
* a budget matches a pod of its own namespace whose labels its selector selects — a ``null``
  or empty selector (or one that does not compile) selects nothing here, as in
  kube-scheduler (not as in the disruption controller, where ``{}`` selects every pod);
* a pod named in the budget's ``status.disruptedPods`` is being disrupted already: it neither
  counts nor uses up the budget;
* otherwise the budget's remaining ``disruptionsAllowed`` goes down by one, and the pod
  violates a budget when any of its budgets goes below zero.

Nothing is enforced: kube-scheduler deletes victims without the Eviction API, so budgets only
rank the victims (reprieved first) and the nodes (``NumPDBViolations``).

Cost: O(pods × budgets of their namespace) per call; budgets are few per namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_kube.objects import ObjectView
from hami_protocol.errors import ProtocolError
from hami_protocol.selectors import LabelSelector, parse_label_selector

__all__ = ["Budget", "BudgetedPod", "DisruptionBudgets", "read_budget"]


@dataclass(frozen=True, slots=True)
class Budget:
    namespace: str
    name: str
    selector: LabelSelector | None
    """``None``: selects nothing (a ``null``, empty or invalid selector)."""
    allowed: int
    """``status.disruptionsAllowed``."""
    disrupted: frozenset[str]
    """Names in ``status.disruptedPods``."""


@dataclass(frozen=True, slots=True)
class BudgetedPod:
    """A potential victim as the budgets read it."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str]


def _selector(spec: Mapping[str, Any]) -> LabelSelector | None:
    raw = spec.get("selector")
    if not isinstance(raw, dict):
        return None
    try:
        selector = parse_label_selector(raw, path="spec.selector")
    except (ProtocolError, ValueError):
        return None
    return None if selector.is_everything else selector


def read_budget(obj: Mapping[str, Any]) -> Budget:
    view = ObjectView(obj)
    spec, status = view.raw.get("spec"), view.raw.get("status")
    spec = spec if isinstance(spec, dict) else {}
    status = status if isinstance(status, dict) else {}
    allowed = status.get("disruptionsAllowed")
    disrupted = status.get("disruptedPods")
    return Budget(
        view.namespace,
        view.name,
        _selector(spec),
        allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
        frozenset(disrupted) if isinstance(disrupted, dict) else frozenset(),
    )


class DisruptionBudgets:
    """The budgets by namespace (see the module docstring)."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, Budget]] = {}

    def __len__(self) -> int:
        return sum(len(budgets) for budgets in self._by_namespace.values())

    def upsert(self, obj: Mapping[str, Any]) -> None:
        budget = read_budget(obj)
        if budget.name:
            self._by_namespace.setdefault(budget.namespace, {})[budget.name] = budget

    def remove(self, obj: Mapping[str, Any]) -> None:
        view = ObjectView(obj)
        budgets = self._by_namespace.get(view.namespace)
        if budgets is not None:
            budgets.pop(view.name, None)
            if not budgets:
                del self._by_namespace[view.namespace]

    def violating(self, pods: Sequence[BudgetedPod]) -> frozenset[str]:
        """UIDs of ``pods`` (most important first) whose eviction would break a budget."""
        if not self._by_namespace:
            return frozenset()
        left: dict[tuple[str, str], int] = {}
        found: set[str] = set()
        for pod in pods:
            if not pod.labels:
                continue
            for budget in self._by_namespace.get(pod.namespace, {}).values():
                selector = budget.selector
                if selector is None or not selector.matches(pod.labels):
                    continue
                if pod.name in budget.disrupted:
                    continue
                key = (budget.namespace, budget.name)
                remaining = left.get(key, budget.allowed) - 1
                left[key] = remaining
                if remaining < 0:
                    found.add(pod.uid)
        return frozenset(found)
