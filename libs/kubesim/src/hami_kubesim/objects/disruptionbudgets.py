"""PodDisruptionBudget (``policy/v1``) as kube-apiserver stores it.

Sources: ``pkg/registry/policy/poddisruptionbudget/strategy.go`` (status reset on create,
``metadata.generation`` 1 on create and bumped by spec changes, spec kept by status writes),
``pkg/apis/policy/validation/validation.go`` (``ValidatePodDisruptionBudgetSpec``,
``ValidatePodDisruptionBudgetStatusUpdate``) and ``pkg/apis/apps/validation``
(``ValidatePositiveIntOrPercent``, ``IsNotMoreThan100Percent``).

``minAvailable`` / ``maxUnavailable`` are ``IntOrString``: an integer or ``"<n>%"``.
:func:`scaled_value` is ``intstr.GetScaledValueFromIntOrPercent``, which the disruption
controller stand-in uses too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from hami_kubesim.objects.validation import Cause, invalid, required
from hami_protocol.errors import ProtocolError
from hami_protocol.selectors import LabelSelector, parse_label_selector

_PERCENT = re.compile(r"^[0-9]+%$")
PERCENT_MESSAGE: Final = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)
_EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")
_STATUS_COUNTS = ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
_CONDITION_STATUSES = ("False", "True", "Unknown")
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_REASON_MESSAGE = (
    "a condition reason must start with alphabetic character, optionally followed by a string "
    "of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' "
    "(e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or "
    "'ReasonA:ReasonB', regex used for validation is "
    "'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')"
)


def initial_status() -> dict[str, Any]:
    """The status every new budget has (``PrepareForCreate`` resets it; zero counts are not
    ``omitempty`` in ``policy/v1``)."""
    return dict.fromkeys(_STATUS_COUNTS, 0)


def prepare_for_create(obj: dict[str, Any]) -> None:
    obj["status"] = initial_status()
    obj["metadata"]["generation"] = 1


def prepare_for_update(
    new: dict[str, Any], old: Mapping[str, Any], subresource: str | None
) -> None:
    """Clients cannot set ``generation``; a change of the spec through the main resource bumps
    it.  ``new`` is a fresh dict whose ``metadata`` may be shared: replaced, not changed."""
    generation = int(old["metadata"].get("generation") or 1)
    if subresource is None and new.get("spec") != old.get("spec"):
        generation += 1
    new["metadata"] = {**new["metadata"], "generation": generation}


def int_or_string_repr(value: object) -> str:
    """How a field error prints an ``intstr.IntOrString`` (Go's ``%#v``)."""
    if isinstance(value, str):
        return f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:"{value}"}}'
    return f'intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:""}}'


def _int_or_percent(where: str, value: object) -> list[Cause]:
    shown = int_or_string_repr(value)
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [(where, "FieldValueInvalid", f"Invalid value: {shown}: {PERCENT_MESSAGE}")]
        if int(value[:-1]) > 100:
            return [
                (
                    where,
                    "FieldValueInvalid",
                    f"Invalid value: {shown}: must not be greater than 100%",
                )
            ]
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [] if value >= 0 else [invalid(where, value, "must be greater than or equal to 0")]
    return [invalid(where, value, "must be an integer or percentage (e.g '5%')")]


def selector_problem(selector: object) -> str | None:
    """Why ``spec.selector`` is not a valid label selector; ``None`` when it is (or is null)."""
    if selector is None:
        return None
    try:
        parse_label_selector(selector, path="spec.selector")
    except ProtocolError as error:
        return error.reason
    return None


def selector_of(pdb: Mapping[str, Any]) -> LabelSelector | None:
    """The budget's selector; ``None`` for a ``null`` one, which selects no pod (an empty
    ``{}`` selects every pod of the namespace in ``policy/v1``).  Stored budgets are valid."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return None
    return parse_label_selector(selector, path="spec.selector")


def validate_budget(obj: Mapping[str, Any]) -> list[Cause]:
    """``ValidatePodDisruptionBudgetSpec``."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        return [invalid("spec", spec, "must be an object")]
    causes: list[Cause] = []
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    if min_available is not None and max_unavailable is not None:
        # Go prints the spec struct (pointers and all) here; a JSON rendering says the same.
        causes.append(invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    if min_available is not None:
        causes.extend(_int_or_percent("spec.minAvailable", min_available))
    if max_unavailable is not None:
        causes.extend(_int_or_percent("spec.maxUnavailable", max_unavailable))
    problem = selector_problem(spec.get("selector"))
    if problem is not None:
        causes.append(invalid("spec.selector", spec.get("selector"), problem))
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in _EVICTION_POLICIES:
        causes.append(
            (
                "spec.unhealthyPodEvictionPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: '
                + ", ".join(f'"{p}"' for p in _EVICTION_POLICIES),
            )
        )
    return causes


def validate_status(obj: Mapping[str, Any]) -> list[Cause]:
    """``ValidatePodDisruptionBudgetStatusUpdate``: the counts are never negative, the
    conditions are valid ``metav1.Condition`` s."""
    status = obj.get("status") or {}
    causes: list[Cause] = []
    for key in _STATUS_COUNTS:
        value = status.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            causes.append(invalid(f"status.{key}", value, "must be an integer"))
        elif value < 0:
            causes.append(invalid(f"status.{key}", value, "must be greater than or equal to 0"))
    seen: set[object] = set()
    for index, condition in enumerate(status.get("conditions") or ()):
        where = f"status.conditions[{index}]"
        if not isinstance(condition, dict):
            causes.append(invalid(where, condition, "must be an object"))
            continue
        kind = condition.get("type")
        if kind in seen:
            causes.append((f"{where}.type", "FieldValueDuplicate", f"Duplicate value: {kind!r}"))
        seen.add(kind)
        causes.extend(_validate_condition(where, condition))
    return causes


def _validate_condition(where: str, condition: Mapping[str, Any]) -> list[Cause]:
    """``metav1validation.ValidateCondition`` (the type's own syntax is not checked)."""
    causes: list[Cause] = []
    if not condition.get("type"):
        causes.append(required(f"{where}.type"))
    status = condition.get("status")
    if status not in _CONDITION_STATUSES:
        causes.append(
            (
                f"{where}.status",
                "FieldValueNotSupported",
                f'Unsupported value: "{status}": supported values: '
                + ", ".join(f'"{s}"' for s in _CONDITION_STATUSES),
            )
        )
    generation = condition.get("observedGeneration", 0)
    if isinstance(generation, int) and generation < 0:
        causes.append(
            invalid(
                f"{where}.observedGeneration", generation, "must be greater than or equal to zero"
            )
        )
    if not condition.get("lastTransitionTime"):
        causes.append(required(f"{where}.lastTransitionTime", "must be set"))
    reason = condition.get("reason")
    if not reason:
        causes.append(required(f"{where}.reason", "must be set"))
    elif not isinstance(reason, str) or not _REASON.match(reason):
        causes.append(invalid(f"{where}.reason", reason, _REASON_MESSAGE))
    return causes


def scaled_value(value: int | str, total: int, *, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an integer as is, ``"n%"`` of ``total``."""
    if isinstance(value, int):
        return value
    scaled = int(value.rstrip("%")) * total
    return -(-scaled // 100) if round_up else scaled // 100
