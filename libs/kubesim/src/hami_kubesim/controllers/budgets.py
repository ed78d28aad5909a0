"""The disruption controller's decisions, pure: a PodDisruptionBudget's status from the pods it
selects, and when a pod's ``DisruptionTarget`` condition has gone stale.

From ``pkg/controller/disruption/disruption.go`` (``trySync``, ``getExpectedPodCount``,
``getExpectedScale``, ``countHealthyPods``, ``buildDisruptedPodMap``, ``updatePdbStatus``,
``failSafe``, ``nonTerminatingPodHasStaleDisruptionCondition``) and
``pkg/apis/policy/helper`` (``UpdateDisruptionAllowedCondition``, ``ConditionsAreUpToDate``).

* Pods: those of the budget's namespace its selector matches (``null``: none; ``{}``: all).
* ``expectedPods`` / ``desiredHealthy``: an integer ``minAvailable`` needs nothing more (expected
  = the selected pods).  ``maxUnavailable`` and a percentage ``minAvailable`` need the scale of
  each pod's controller; kubesim serves no workload kinds, so a pod with a controller
  (``ownerReferences[].controller``) fails the sync with ``found no controllers for pod "<p>"``
  as a real cluster does for an owner kind it does not know, and pods without one are
  *unmanaged*: they add nothing to the expected count (a Warning says so).
* Healthy: not being deleted, not in ``status.disruptedPods`` (less than 2 minutes old), and
  its ``Ready`` condition ``True`` (the kubelet stand-in sets it when the pod runs).
* ``disruptionsAllowed`` = healthy - desired, 0 when negative or when nothing is expected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kube.timefmt import format_time, parse_time
from hami_kubesim.objects.disruptionbudgets import scaled_value, selector_of

DELETION_TIMEOUT: Final = timedelta(minutes=2)
"""How long a pod named in ``status.disruptedPods`` is expected to take to be deleted."""
STALE_POD_DISRUPTION_TIMEOUT: Final = timedelta(minutes=2)
"""``--disruption-controller-stale-pod-disruption-timeout``'s default."""
DISRUPTION_ALLOWED: Final = "DisruptionAllowed"
DISRUPTION_TARGET: Final = "DisruptionTarget"

EventSpec = tuple[Mapping[str, Any] | None, str, str, str]
"""``(pod, type, reason, message)``; ``pod`` ``None`` means the budget itself."""


@dataclass(frozen=True, slots=True)
class BudgetSync:
    """What one sync of a budget does."""

    status: dict[str, Any] | None
    """The status to write; ``None`` when the stored one is up to date."""
    recheck_after: float | None = None
    """Seconds until a ``disruptedPods`` entry expires and the budget must be synced again."""
    events: tuple[EventSpec, ...] = field(default_factory=tuple)


class _NoController(Exception):  # noqa: N818 - the controller's own error text
    pass


def selected_pods(pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[PodView]:
    """The pods of the budget's namespace its selector matches."""
    selector = selector_of(pdb)
    if selector is None:
        return []
    namespace = pdb["metadata"].get("namespace")
    return [
        view
        for view in map(PodView, pods)
        if view.namespace == namespace and selector.matches(view.labels)
    ]


def _controller_of(pod: PodView) -> Mapping[str, Any] | None:
    owners = pod.meta.get("ownerReferences") or ()
    return next((o for o in owners if isinstance(o, dict) and o.get("controller")), None)


def _expected_scale(pods: Sequence[PodView]) -> tuple[int, list[str]]:
    unmanaged = []
    for pod in pods:
        if _controller_of(pod) is None:
            unmanaged.append(pod.name)
            continue
        # No workload kind is served, so no finder ever finds the controller.
        raise _NoController(f'found no controllers for pod "{pod.name}"')
    return 0, unmanaged


def expected_pod_count(
    pdb: Mapping[str, Any], pods: Sequence[PodView]
) -> tuple[int, int, list[str]]:
    """``(expectedPods, desiredHealthy, unmanaged pod names)``."""
    spec = pdb.get("spec") or {}
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_unavailable is not None:
        expected, unmanaged = _expected_scale(pods)
        desired = expected - scaled_value(max_unavailable, expected, round_up=True)
        return expected, max(desired, 0), unmanaged
    if isinstance(min_available, int):
        return len(pods), min_available, []
    if isinstance(min_available, str):
        expected, unmanaged = _expected_scale(pods)
        return expected, scaled_value(min_available, expected, round_up=True), unmanaged
    return 0, 0, []


def _ready(pod: PodView) -> bool:
    conditions = pod.status.get("conditions") or ()
    return any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def _disrupted_pod_map(
    pdb: Mapping[str, Any], pods: Sequence[PodView], now: datetime
) -> tuple[dict[str, str], datetime | None, list[PodView]]:
    """The entries of ``status.disruptedPods`` still awaited, the earliest moment one expires,
    and the pods whose deletion did not come in time."""
    recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
    kept: dict[str, str] = {}
    recheck: datetime | None = None
    late: list[PodView] = []
    for pod in pods:
        if pod.deleting or pod.name not in recorded:
            continue
        expected_deletion = parse_time(str(recorded[pod.name])) + DELETION_TIMEOUT
        # Due at the very moment counts as late: the recheck fires exactly then on a virtual
        # clock, where the real one's fires a little after.
        if expected_deletion <= now:
            late.append(pod)
            continue
        if recheck is None or expected_deletion < recheck:
            recheck = expected_deletion
        kept[pod.name] = str(recorded[pod.name])
    return kept, recheck, late


def _count_healthy(pods: Sequence[PodView], disrupted: Mapping[str, str], now: datetime) -> int:
    healthy = 0
    for pod in pods:
        if pod.deleting:
            continue
        when = disrupted.get(pod.name)
        if when is not None and parse_time(when) + DELETION_TIMEOUT > now:
            continue
        healthy += int(_ready(pod))
    return healthy


def _set_condition(
    conditions: list[dict[str, Any]], new: dict[str, Any], now: datetime
) -> list[dict[str, Any]]:
    """``apimeta.SetStatusCondition``: the transition time moves only when the status does."""
    out = [dict(c) for c in conditions]
    current = next((c for c in out if c.get("type") == new["type"]), None)
    if current is None:
        out.append({**new, "lastTransitionTime": format_time(now)})
        return out
    if current.get("status") != new["status"]:
        current["lastTransitionTime"] = format_time(now)
    current.update({k: v for k, v in new.items() if k != "lastTransitionTime"})
    return out


def _condition(status: str, reason: str, generation: int, message: str = "") -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": DISRUPTION_ALLOWED,
        "status": status,
        "reason": reason,
        "message": message,
    }
    if generation:
        condition["observedGeneration"] = generation
    return condition


def _conditions_up_to_date(status: Mapping[str, Any], generation: int) -> bool:
    found = next(
        (c for c in status.get("conditions") or () if c.get("type") == DISRUPTION_ALLOWED), None
    )
    if found is None or status.get("observedGeneration", 0) != generation:
        return False
    if status.get("disruptionsAllowed", 0) > 0:
        return (found.get("status"), found.get("reason")) == ("True", "SufficientPods")
    return (found.get("status"), found.get("reason")) == ("False", "InsufficientPods")


def _status(
    pdb: Mapping[str, Any],
    counts: tuple[int, int, int],
    disrupted: dict[str, str],
    now: datetime,
) -> dict[str, Any] | None:
    """``updatePdbStatus``: the new status, or ``None`` when the stored one says it all."""
    healthy, desired, expected = counts
    old = pdb.get("status") or {}
    generation = int(pdb["metadata"].get("generation") or 0)
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    if (
        (old.get("currentHealthy", 0), old.get("desiredHealthy", 0), old.get("expectedPods", 0))
        == (healthy, desired, expected)
        and old.get("disruptionsAllowed", 0) == allowed
        and (old.get("disruptedPods") or {}) == disrupted
        and _conditions_up_to_date(old, generation)
    ):
        return None
    status: dict[str, Any] = {
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }
    if generation:
        status["observedGeneration"] = generation
    if disrupted:
        status["disruptedPods"] = disrupted
    condition = (
        _condition("True", "SufficientPods", generation)
        if allowed > 0
        else _condition("False", "InsufficientPods", generation)
    )
    status["conditions"] = _set_condition(list(old.get("conditions") or ()), condition, now)
    return status


def fail_safe_status(pdb: Mapping[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """``failSafe``: the stored status with no disruption allowed and the sync's error."""
    old = dict(pdb.get("status") or {})
    condition = _condition("False", "SyncFailed", int(old.get("observedGeneration") or 0), message)
    return {
        **old,
        "disruptionsAllowed": 0,
        "conditions": _set_condition(list(old.get("conditions") or ()), condition, now),
    }


def go_selector(selector: object) -> str:
    """A ``*metav1.LabelSelector`` as Go's ``%v`` prints it (the UnmanagedPods event)."""
    if not isinstance(selector, dict):
        return "nil"
    labels = selector.get("matchLabels") or {}
    shown = "".join(f"{k}: {labels[k]}," for k in sorted(labels))
    exprs = "".join(
        f"LabelSelectorRequirement{{Key:{e.get('key')},Operator:{e.get('operator')},"
        f"Values:[{' '.join(e.get('values') or [])}],}},"
        for e in selector.get("matchExpressions") or ()
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{shown}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )


def sync_budget(
    pdb: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: datetime
) -> BudgetSync:
    """One ``trySync`` (with ``failSafe`` when the expected count cannot be computed)."""
    selected = selected_pods(pdb, pods)
    events: list[EventSpec] = []
    if not selected:
        events.append((None, "Normal", "NoPods", "No matching pods found"))
    try:
        expected, desired, unmanaged = expected_pod_count(pdb, selected)
    except _NoController as error:
        events.append(
            (
                None,
                "Warning",
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {error}",
            )
        )
        return BudgetSync(fail_safe_status(pdb, str(error), now), None, tuple(events))
    if unmanaged:
        selector = go_selector((pdb.get("spec") or {}).get("selector"))
        events.append(
            (
                None,
                "Warning",
                "UnmanagedPods",
                f"Pods selected by this PodDisruptionBudget (selector: {selector}) were found "
                "to be unmanaged. As a result, the status of the PDB cannot be calculated "
                "correctly, which may result in undefined behavior. To account for these pods "
                'please set ".spec.minAvailable" field of the PDB to an integer value.',
            )
        )
    disrupted, recheck, late = _disrupted_pod_map(pdb, selected, now)
    namespace = pdb["metadata"].get("namespace")
    for pod in late:
        # The controller's own message names the namespace twice (a typo kept upstream).
        events.append(
            (
                pod.raw,
                "Warning",
                "NotDeleted",
                f"Pod was expected by PDB {namespace}/{namespace} to be deleted but it wasn't",
            )
        )
    healthy = _count_healthy(selected, disrupted, now)
    status = _status(pdb, (healthy, desired, expected), disrupted, now)
    after = None if recheck is None else max((recheck - now).total_seconds(), 0.0)
    return BudgetSync(status, after, tuple(events))


def stale_disruption_after(pod: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until ``pod``'s ``DisruptionTarget=True`` condition counts as stale (0: now),
    or ``None`` when it has none that can go stale: a pod being deleted, one that ended, or a
    condition the kubelet set are never reset."""
    view = PodView(pod)
    if view.deleting or view.terminal:
        return None
    found = next(
        (
            c
            for c in view.status.get("conditions") or ()
            if isinstance(c, dict) and c.get("type") == DISRUPTION_TARGET
        ),
        None,
    )
    if found is None or found.get("status") != "True":
        return None
    if found.get("reason") == "TerminationByKubelet":
        return None
    try:
        since = parse_time(str(found.get("lastTransitionTime")))
    except ValueError:
        return 0.0
    return max((since + STALE_POD_DISRUPTION_TIMEOUT - now).total_seconds(), 0.0)


def reset_disruption(pod: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The pod's status with its stale ``DisruptionTarget`` reset to ``False``
    (``UpdatePodCondition``: the whole condition is replaced)."""
    status = dict(pod.get("status") or {})
    conditions = [dict(c) for c in status.get("conditions") or ()]
    replaced = {
        "type": DISRUPTION_TARGET,
        "status": "False",
        "lastProbeTime": None,
        "lastTransitionTime": format_time(now),
    }
    status["conditions"] = [
        replaced if c.get("type") == DISRUPTION_TARGET else c for c in conditions
    ]
    return status
