"""Device capacities and their ``requestPolicy`` (consumable capacity, KEP-5075) as
``validateMultiAllocatableDeviceCapacity`` / ``validateRequestPolicy`` check them, with the
DRAConsumableCapacity gate on (beta, default on in 1.36).

Quantities are compared exactly; the step grid uses ``Quantity.Value()`` (rounded up to an
integer), and printed values are ``Quantity.String()`` (:func:`canonical_quantity`).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from hami_kubesim.objects.quantities import canonical_quantity, format_quantity, read_quantity
from hami_kubesim.objects.validation import Cause, forbidden, invalid, required, too_many

VALID_VALUES_MAX: Final = 10
MUST_BE_MULTI: Final = "allowMultipleAllocations must be true"
BOTH_POLICIES: Final = (
    'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the '
    "same time"
)


def quantity_problem(where: str, value: object) -> list[Cause]:
    """A value that does not parse as a quantity (the real server refuses it while decoding)."""
    if canonical_quantity(value) is None:
        return [invalid(where, value, "must be a quantity")]
    return []


def _value(quantity: object) -> Fraction:
    return read_quantity(quantity)


def _int_value(quantity: Fraction) -> int:
    """``Quantity.Value()``: rounded up to an integer."""
    return -(-quantity.numerator // quantity.denominator)


def _show(quantity: object) -> str:
    return canonical_quantity(quantity) or str(quantity)


def validate_capacity(where: str, capacity: Any, *, multi: bool) -> list[Cause]:
    """One ``capacity[<name>]`` entry of a device (``multi``: ``allowMultipleAllocations``)."""
    if not isinstance(capacity, Mapping):
        return [invalid(where, capacity, "must be an object")]
    causes = quantity_problem(f"{where}.value", capacity.get("value"))
    policy = capacity.get("requestPolicy")
    if policy is None:
        return causes
    if not multi:
        return [*causes, forbidden(f"{where}.requestPolicy", MUST_BE_MULTI)]
    if causes:
        return causes
    return _validate_policy(f"{where}.requestPolicy", capacity["value"], policy)


def _validate_policy(where: str, total: object, policy: Any) -> list[Cause]:
    if not isinstance(policy, Mapping):
        return [invalid(where, policy, "must be an object")]
    parts = [
        (f"{where}.default", policy.get("default")),
        *((f"{where}.validValues[{i}]", v) for i, v in enumerate(policy.get("validValues") or ())),
        *((f"{where}.validRange.{k}", v) for k, v in (policy.get("validRange") or {}).items()),
    ]
    bad = [c for path, v in parts if v is not None for c in quantity_problem(path, v)]
    if bad:
        return bad
    values, valid_range = policy.get("validValues") or [], policy.get("validRange")
    if values and valid_range is not None:
        return [forbidden(where, BOTH_POLICIES)]
    default = policy.get("default")
    if values:
        if default is None:
            return [required(f"{where}.default", "required when validValues is defined")]
        return _validate_values(f"{where}.validValues", default, total, values)
    if valid_range is not None:
        if default is None:
            return [required(f"{where}.default", "required when validRange is defined")]
        return _validate_range(f"{where}.validRange", default, total, valid_range)
    return []


def _validate_values(
    where: str, default_raw: object, total_raw: object, values: list[Any]
) -> list[Cause]:
    """``validateRequestPolicyValidValues``."""
    default, total = _value(default_raw), _value(total_raw)
    causes: list[Cause] = []
    amounts = [_value(v) for v in values]
    for i in range(len(amounts) - 1):
        if amounts[i] > amounts[i + 1]:
            shown = _show(values[i + 1])
            causes.append(
                invalid(f"{where}[{i + 1}]", shown, "values must be sorted in ascending order")
            )
    if len(values) > VALID_VALUES_MAX:
        return [*causes, too_many(where, len(values), VALID_VALUES_MAX)]
    seen: set[int] = set()
    for i, (raw, amount) in enumerate(zip(values, amounts, strict=True)):
        if amount > total:
            causes.append(
                invalid(
                    f"{where}[{i}]",
                    _show(raw),
                    f"option is larger than capacity value: {_show(total_raw)}",
                )
            )
        key = _int_value(amount)
        if key in seen:
            causes.append((f"{where}[{i}]", "FieldValueDuplicate", f'Duplicate value: "{key}"'))
        seen.add(key)
    if default not in amounts:
        causes.append(
            invalid(
                where,
                _show(default_raw),
                "default value is not valid according to the requestPolicy",
            )
        )
    return causes


def _validate_range(
    where: str, default_raw: object, total_raw: object, valid_range: Any
) -> list[Cause]:
    """``validateRequestPolicyRange``."""
    if not isinstance(valid_range, Mapping):
        return [invalid(where, valid_range, "must be an object")]
    if valid_range.get("min") is None:
        return [required(f"{where}.min", "required when validRange is defined")]
    default, total = _value(default_raw), _value(total_raw)
    low = _value(valid_range["min"])
    low_text, total_text = _show(valid_range["min"]), _show(total_raw)
    default_text = _show(default_raw)
    causes: list[Cause] = []
    if low > total:
        causes.append(
            invalid(f"{where}.min", low_text, f"min is larger than capacity value: {total_text}")
        )
    if default < low:
        causes.append(
            invalid(f"{where}.default", default_text, f"default is less than min: {low_text}")
        )
    high_raw = valid_range.get("max")
    if high_raw is not None:
        high, high_text = _value(high_raw), _show(high_raw)
        if low > high:
            causes.append(invalid(f"{where}.max", low_text, f"min is larger than max: {high_text}"))
        if high > total:
            causes.append(
                invalid(
                    f"{where}.max", high_text, f"max is larger than capacity value: {total_text}"
                )
            )
        if default > high:
            causes.append(
                invalid(f"{where}.default", default_text, f"default is more than max: {high_text}")
            )
    step_raw = valid_range.get("step")
    if step_raw is None:
        return causes
    step, step_text = _value(step_raw), _show(step_raw)
    if step <= 0:
        return [*causes, invalid(f"{where}.step", step_text, "must be greater than zero")]
    if low + step > total:
        one_step = format_quantity(low + step, like=str(valid_range["min"]))
        causes.append(
            invalid(
                f"{where}.step",
                step_text,
                f"one step {one_step} is larger than capacity value: {total_text}",
            )
        )
    grid = [(default, default_text)]
    if high_raw is not None:
        grid.append((_value(high_raw), _show(high_raw)))
    for amount, shown in grid:
        if (_int_value(amount) - _int_value(low)) % _int_value(step):
            causes.append(
                invalid(
                    f"{where}.step",
                    shown,
                    f"value is not a multiple of a given step ({step_text}) from ({low_text})",
                )
            )
    return causes


def canonical_capacities(capacities: Any) -> Any:
    """``{name: {value, requestPolicy}}`` with every quantity in canonical form (as the server
    stores it); anything malformed is left as it is for validation to refuse."""
    if not isinstance(capacities, Mapping):
        return capacities
    return {key: _canonical_capacity(entry) for key, entry in capacities.items()}


def _canonical_capacity(entry: Any) -> Any:
    if not isinstance(entry, Mapping):
        return entry
    out = dict(entry)
    out["value"] = canonical_quantity(entry.get("value")) or entry.get("value")
    policy = entry.get("requestPolicy")
    if isinstance(policy, Mapping):
        fixed = dict(policy)
        if "default" in fixed:
            fixed["default"] = canonical_quantity(fixed["default"]) or fixed["default"]
        if isinstance(fixed.get("validValues"), list):
            fixed["validValues"] = [canonical_quantity(v) or v for v in fixed["validValues"]]
        if isinstance(fixed.get("validRange"), Mapping):
            fixed["validRange"] = canonical_map(fixed["validRange"])
        out["requestPolicy"] = fixed
    return out


def canonical_map(quantities: Any) -> Any:
    """A ``{key: quantity}`` map in canonical form (claim ``capacity.requests``,
    ``consumedCapacity``)."""
    if not isinstance(quantities, Mapping):
        return quantities
    return {key: canonical_quantity(v) or v for key, v in quantities.items()}


__all__ = [
    "BOTH_POLICIES",
    "MUST_BE_MULTI",
    "canonical_capacities",
    "canonical_map",
    "quantity_problem",
    "validate_capacity",
]
