"""The selectors of list and watch requests: field selectors, parsed and matched as the API server
does (a field that is absent reads as ``""``), and the ``labelSelector`` parameter read through
:mod:`hami_protocol.selectors` with its errors turned into the API server's 400."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_kubesim.apiserver.errors import BadRequestError
from hami_protocol.errors import ProtocolError
from hami_protocol.selectors import EVERYTHING, LabelSelector, parse_selector_string


def label_selector_from_query(text: str | None) -> LabelSelector:
    """The ``labelSelector`` query parameter (``a=b,c!=d,e in (x,y),!f,g``) parsed by
    :func:`hami_protocol.selectors.parse_selector_string`; bad syntax, keys or values are the API
    server's 400 ``BadRequest``."""
    if not text or not text.strip():
        return EVERYTHING
    try:
        return parse_selector_string(text)
    except ProtocolError as exc:
        shown = "" if exc.value == text else f": {exc.value!r}"
        raise BadRequestError(
            f"unable to parse requirement: {exc.reason}{shown} (in selector {text!r})"
        ) from exc


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    value: str
    negate: bool


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, r.field) == r.value) != r.negate for r in self.requirements)

    def exact(self, field: str) -> str | None:
        """The value an equality requirement pins ``field`` to, if any (used for indexes)."""
        for r in self.requirements:
            if r.field == field and not r.negate:
                return r.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:
        cur.append("\\")
    parts.append("".join(cur))
    return parts


def _unescape(text: str, whole: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=":
                raise BadRequestError(f"invalid field selector: {whole!r}: invalid escape sequence")
            out.append(text[i + 1])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_field_selector(text: str | None, allowed: tuple[str, ...]) -> FieldSelector:
    """Parse ``spec.nodeName=a,status.phase!=Failed``; fields outside ``allowed`` are refused
    with ``field label not supported: <field>``."""
    if not text or not text.strip():
        return FieldSelector()
    reqs: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if not term.strip():
            continue
        for op in ("!=", "==", "="):
            idx = term.find(op)
            if idx > 0 and (op != "=" or term[idx - 1] not in "!="):
                field = term[:idx].strip()
                value = _unescape(term[idx + len(op) :], text)
                break
        else:
            raise BadRequestError(f"invalid selector: '{text}'; can't understand '{term}'")
        if field not in allowed:
            raise BadRequestError(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, value, op == "!="))
    return FieldSelector(tuple(reqs))


def field_value(obj: Mapping[str, Any], field: str) -> str:
    """The string a field selector compares against (``""`` when absent)."""
    if field == "source":  # core/v1 Event: the selectable field is source.component
        field = "source.component"
    cur: Any = obj
    for part in field.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, str):
        return cur
    return str(cur)
