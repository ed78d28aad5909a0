"""Label selectors (equality- and set-based) and field selectors, parsed and matched as the API
server does: ``a!=b`` and ``a notin (...)`` match objects without label ``a``; a field that is
absent reads as ``""``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_kubesim.errors import BadRequestError

_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[A-Za-z0-9._/\-]+)")
_KEY = re.compile(
    r"^([A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._\-]*[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._\-]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    op: str  # "in", "notin", "exists", "!", "gt", "lt"  ("=" and "!=" are in/notin of one)
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "in":
            return present and labels[self.key] in self.values
        if self.op == "notin":
            return not present or labels[self.key] not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if not present:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        bound = int(next(iter(self.values)))
        return have > bound if self.op == "gt" else have < bound


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[LabelRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)


def _bad(text: str, why: str) -> BadRequestError:
    return BadRequestError(f"unable to parse requirement: {why} (in selector {text!r})")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _bad(text, f"unexpected character {text[pos]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _check_key(text: str, key: str) -> str:
    if not _KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise _bad(text, f"invalid label key {key!r}")
    return key


def _check_value(text: str, value: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise _bad(text, f"invalid label value {value!r}")
    return value


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``a=b,c!=d,e in (x,y),!f,g`` into a selector; ``BadRequest`` on bad syntax."""
    if not text or not text.strip():
        return LabelSelector()
    toks = _tokens(text)
    reqs: list[LabelRequirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(toks):
            raise _bad(text, "unexpected end of selector")
        tok = toks[i]
        i += 1
        return tok

    while i < len(toks):
        tok = take()
        if tok == "!":
            reqs.append(LabelRequirement(_check_key(text, take()), "!"))
        else:
            key = _check_key(text, tok)
            nxt = toks[i] if i < len(toks) else ","
            if nxt == ",":
                reqs.append(LabelRequirement(key, "exists"))
            elif nxt in ("=", "==", "!="):
                i += 1
                value = toks[i] if i < len(toks) and toks[i] != "," else ""
                if value:
                    i += 1
                op = "notin" if nxt == "!=" else "in"
                reqs.append(LabelRequirement(key, op, frozenset({_check_value(text, value)})))
            elif nxt in ("in", "notin"):
                i += 1
                if take() != "(":
                    raise _bad(text, f"expected '(' after {nxt}")
                values: set[str] = set()
                while True:
                    tok = take()
                    if tok == ")":
                        break
                    if tok == ",":
                        continue
                    values.add(_check_value(text, tok))
                reqs.append(LabelRequirement(key, nxt, frozenset(values)))
            elif nxt in (">", "<"):
                i += 1
                bound = take()
                if not bound.lstrip("-").isdigit():
                    raise _bad(text, f"{bound!r} is not an integer")
                reqs.append(LabelRequirement(key, "gt" if nxt == ">" else "lt", frozenset({bound})))
            else:
                raise _bad(text, f"unexpected {nxt!r} after key {key!r}")
        if i < len(toks):
            if toks[i] != ",":
                raise _bad(text, f"expected ',' but found {toks[i]!r}")
            i += 1
            if i >= len(toks):
                raise _bad(text, "expected a requirement after ','")
    return LabelSelector(tuple(reqs))


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
