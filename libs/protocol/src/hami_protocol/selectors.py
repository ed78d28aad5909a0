"""Kubernetes label selectors: the JSON ``LabelSelector`` and the ``labelSelector=`` string form.

Both forms compile to one frozen :class:`LabelSelector` (a sorted, de-duplicated tuple of
requirements that must all hold), so a selector read from an annotation and one read from a query
parameter compare equal when they mean the same thing.  ``matchLabels`` entries and ``a=b`` become
``In`` requirements with one value; ``a!=b`` becomes ``NotIn``.  Validation follows the API server's
rules for label keys, label values and operators.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from hami_protocol.errors import DecodeError, ValidationError

__all__ = [
    "EVERYTHING",
    "LabelSelector",
    "Operator",
    "Requirement",
    "format_selector",
    "label_key_problem",
    "label_value_problem",
    "matches",
    "parse_label_selector",
    "parse_selector_string",
    "requirement",
]


class Operator(StrEnum):
    """Requirement operators (the spellings of apimachinery's ``selection.Operator``)."""

    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


# The JSON form knows only these four; Gt/Lt exist only in the string form.
_JSON_OPERATORS: dict[str, Operator] = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}

_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT64_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key <operator> values`` condition.  Build it with :func:`requirement` to validate."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: ``NotIn`` and ``DoesNotExist`` hold when the key is missing."""
        present = self.key in labels
        if self.operator is Operator.EXISTS:
            return present
        if self.operator is Operator.DOES_NOT_EXIST:
            return not present
        if self.operator is Operator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        value = labels[self.key]
        if self.operator is Operator.IN:
            return value in self.values
        actual, bound = _as_int64(value), _as_int64(self.values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if self.operator is Operator.GREATER_THAN else actual < bound

    def to_string(self) -> str:
        """This requirement in the ``labelSelector=`` syntax."""
        op, key, values = self.operator, self.key, self.values
        if op is Operator.EXISTS:
            return key
        if op is Operator.DOES_NOT_EXIST:
            return f"!{key}"
        if op is Operator.GREATER_THAN:
            return f"{key}>{values[0]}"
        if op is Operator.LESS_THAN:
            return f"{key}<{values[0]}"
        if len(values) == 1:
            return f"{key}={values[0]}" if op is Operator.IN else f"{key}!={values[0]}"
        return f"{key} {op.value} ({','.join(values)})"


def _sort_key(req: Requirement) -> tuple[str, str, tuple[str, ...]]:
    return (req.key, req.operator.value, req.values)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Requirements that must all hold.  No requirements (``{}`` or ``""``) selects everything."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def of(cls, requirements: Iterable[Requirement]) -> LabelSelector:
        """The canonical selector for ``requirements`` (sorted, duplicates dropped)."""
        return cls(tuple(sorted(set(requirements), key=_sort_key)))

    @property
    def is_everything(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req.matches(labels) for req in self.requirements)


EVERYTHING = LabelSelector()


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy every requirement of ``selector``."""
    return selector.matches(labels)


def format_selector(selector: LabelSelector) -> str:
    """``selector`` in the ``labelSelector=`` syntax; parses back to an equal selector."""
    return ",".join(req.to_string() for req in selector.requirements)


def _as_int64(text: str) -> int | None:
    if not _INT64_RE.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


# --- validation ---------------------------------------------------------------------------------
def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (``[prefix/]name``), or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if "/" in prefix:
            return "a label key has at most one '/'"
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix):
            return "prefix part must be a lower-case DNS subdomain of at most 253 characters"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63 or not _NAME_RE.fullmatch(name):
        return (
            "name part must be at most 63 characters of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None when it is (empty is valid)."""
    if value and (len(value) > 63 or not _NAME_RE.fullmatch(value)):
        return (
            "a label value must be empty or at most 63 characters of alphanumerics, '-', '_' "
            "or '.', starting and ending with an alphanumeric"
        )
    return None


def requirement(
    key: str, operator: Operator, values: Iterable[str] = (), *, annotation: str = ""
) -> Requirement:
    """A validated :class:`Requirement`, with values sorted and de-duplicated.

    Raises :class:`ValidationError` (naming ``annotation``) as the API server would reject it.
    """
    vals = tuple(sorted(set(values)))
    problem = label_key_problem(key)
    if problem:
        raise ValidationError(annotation, key, f"invalid label key: {problem}")
    if operator in (Operator.IN, Operator.NOT_IN) and not vals:
        raise ValidationError(annotation, key, f"operator {operator.value!r} needs values")
    if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and vals:
        raise ValidationError(annotation, vals, f"operator {operator.value!r} takes no values")
    ordered = operator in (Operator.GREATER_THAN, Operator.LESS_THAN)
    if ordered and (len(vals) != 1 or _as_int64(vals[0]) is None):
        raise ValidationError(annotation, vals, f"operator {operator.value!r} needs 1 integer")
    for value in vals:
        problem = label_value_problem(value)
        if problem:
            raise ValidationError(annotation, value, f"invalid label value for {key!r}: {problem}")
    return Requirement(key, operator, vals)


# --- the JSON form -------------------------------------------------------------------------------
def parse_label_selector(
    obj: object, *, annotation: str = "", path: str = "selector"
) -> LabelSelector:
    """Compile a decoded ``metav1.LabelSelector`` (``matchLabels`` / ``matchExpressions``).

    Unknown fields are rejected; ``null`` lists and maps count as absent.  ``path`` locates the
    selector inside its document for error messages.
    """
    if not isinstance(obj, dict):
        raise DecodeError(annotation, obj, f"{path}: a label selector must be a JSON object")
    _reject_unknown(obj, ("matchLabels", "matchExpressions"), annotation, path)
    reqs: list[Requirement] = []
    match_labels = obj.get("matchLabels")
    if match_labels is not None:
        if not isinstance(match_labels, dict):
            raise DecodeError(annotation, match_labels, f"{path}.matchLabels must be an object")
        for label, value in match_labels.items():
            if not isinstance(value, str):
                raise DecodeError(annotation, value, f"{path}.matchLabels.{label} must be a string")
            reqs.append(requirement(label, Operator.IN, (value,), annotation=annotation))
    expressions = obj.get("matchExpressions")
    if expressions is not None:
        if not isinstance(expressions, list):
            raise DecodeError(annotation, expressions, f"{path}.matchExpressions must be a list")
        for index, expr in enumerate(expressions):
            reqs.append(_parse_expression(expr, annotation, f"{path}.matchExpressions[{index}]"))
    return LabelSelector.of(reqs)


def _parse_expression(expr: object, annotation: str, path: str) -> Requirement:
    if not isinstance(expr, dict):
        raise DecodeError(annotation, expr, f"{path} must be an object")
    _reject_unknown(expr, ("key", "operator", "values"), annotation, path)
    key, op_name, values = expr.get("key"), expr.get("operator"), expr.get("values")
    if not isinstance(key, str):
        raise DecodeError(annotation, key, f"{path}.key must be a string")
    if not isinstance(op_name, str):
        raise DecodeError(annotation, op_name, f"{path}.operator must be a string")
    operator = _JSON_OPERATORS.get(op_name)
    if operator is None:
        raise ValidationError(
            annotation, op_name, f"{path}.operator must be one of {', '.join(_JSON_OPERATORS)}"
        )
    if values is None:
        values = []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise DecodeError(annotation, values, f"{path}.values must be a list of strings")
    return requirement(key, operator, values, annotation=annotation)


def _reject_unknown(
    obj: dict[str, object], known: tuple[str, ...], annotation: str, path: str
) -> None:
    for field in obj:
        if field not in known:
            hint = next((k for k in known if k.lower() == field.lower()), None)
            extra = f" (field names are case-sensitive: did you mean {hint!r}?)" if hint else ""
            raise ValidationError(annotation, field, f"{path}: unknown field {field!r}{extra}")


# --- the string form -----------------------------------------------------------------------------
_SYMBOLS = frozenset("=!(),<>")
_TWO_CHAR_OPS = ("!=", "==")
_END = ""
_SET_OPERATORS = {"in": Operator.IN, "notin": Operator.NOT_IN}
_VALUE_OPERATORS = {
    "=": Operator.IN,
    "==": Operator.IN,
    "!=": Operator.NOT_IN,
    ">": Operator.GREATER_THAN,
    "<": Operator.LESS_THAN,
}


def _lex(text: str) -> list[tuple[bool, str]]:
    """Tokens as (is_identifier, text); symbols are ``!= == = ! ( ) , < >``."""
    tokens: list[tuple[bool, str]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
        elif ch in _SYMBOLS:
            width = 2 if text[i : i + 2] in _TWO_CHAR_OPS else 1
            tokens.append((False, text[i : i + width]))
            i += width
        else:
            start = i
            while i < len(text) and text[i] not in _SYMBOLS and text[i] not in " \t\r\n":
                i += 1
            tokens.append((True, text[start:i]))
    return tokens


class _Parser:
    def __init__(self, text: str, annotation: str) -> None:
        self.text, self.annotation = text, annotation
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self) -> tuple[bool, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (False, _END)

    def take(self) -> tuple[bool, str]:
        token = self.peek()
        self.pos += 1
        return token

    def fail(self, found: str, expected: str) -> DecodeError:
        shown = found or "end of string"
        return DecodeError(self.annotation, self.text, f"found {shown!r}, expected {expected}")

    def key(self) -> str:
        is_ident, lit = self.take()
        if not is_ident or lit in ("in", "notin"):
            raise self.fail(lit, "a label key")
        return lit

    def at_boundary(self) -> bool:
        return self.peek() in ((False, _END), (False, ","))

    def exact_value(self) -> str:
        if self.at_boundary():
            return ""
        is_ident, lit = self.take()
        if not is_ident:
            raise self.fail(lit, "a value")
        return lit

    def value_set(self) -> list[str]:
        is_ident, lit = self.take()
        if (is_ident, lit) != (False, "("):
            raise self.fail(lit, "'('")
        values: list[str] = []
        current = ""
        while True:
            is_ident, lit = self.take()
            if is_ident and not current:
                current = lit
            elif (is_ident, lit) == (False, ","):
                values.append(current)
                current = ""
            elif (is_ident, lit) == (False, ")"):
                values.append(current)
                return values
            else:
                raise self.fail(lit, "',', ')' or a value")

    def requirement(self) -> Requirement:
        if self.peek() == (False, "!"):
            self.take()
            key = self.key()
            if not self.at_boundary():
                raise self.fail(self.peek()[1], "',' or end of string after '!key'")
            return requirement(key, Operator.DOES_NOT_EXIST, annotation=self.annotation)
        key = self.key()
        if self.at_boundary():
            return requirement(key, Operator.EXISTS, annotation=self.annotation)
        is_ident, lit = self.take()
        if is_ident and lit in _SET_OPERATORS:
            op = _SET_OPERATORS[lit]
            return requirement(key, op, self.value_set(), annotation=self.annotation)
        op_or_none = None if is_ident else _VALUE_OPERATORS.get(lit)
        if op_or_none is None:
            raise self.fail(lit, "an operator (=, ==, !=, in, notin, >, <)")
        return requirement(key, op_or_none, (self.exact_value(),), annotation=self.annotation)


def parse_selector_string(text: str, *, annotation: str = "") -> LabelSelector:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h`` (also ``==``, ``>``, ``<``).

    An empty string selects everything.  Syntax errors raise :class:`DecodeError`; invalid keys,
    values or value counts raise :class:`ValidationError`.
    """
    parser = _Parser(text, annotation)
    if parser.peek() == (False, _END):
        return EVERYTHING
    reqs = [parser.requirement()]
    while True:
        is_ident, lit = parser.take()
        if (is_ident, lit) == (False, _END):
            return LabelSelector.of(reqs)
        if (is_ident, lit) != (False, ","):
            raise parser.fail(lit, "',' or end of string")
        if parser.peek() == (False, _END):
            raise parser.fail("", "a requirement after ','")
        reqs.append(parser.requirement())
