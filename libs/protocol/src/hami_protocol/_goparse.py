"""Parsing helpers that reproduce Go's rules for wire scalars and JSON documents.

HAMi writes and reads annotations with ``strconv.ParseBool``, ``strconv.ParseInt`` and
``encoding/json``; values crossing the wire must be read the way those functions read them, which
differs from Python's ``int()``, ``bool()`` and ``json.loads`` in small but real ways (``int()``
takes underscores and Unicode digits, ``json.loads`` takes ``NaN`` and matches keys exactly, ...).
The helpers return ``None`` (or raise :class:`GoJSONError`) instead of raising ProtocolErrors so
the calling codec can name the annotation key in its own error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

from hami_protocol.errors import DecodeError, ValidationError

INT32_MAX: Final = 2**31 - 1
INT32_MIN: Final = -(2**31)
INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)
UINT32_MAX: Final = 2**32 - 1

# strconv.ParseInt with base 10: optional sign, ASCII digits only (no underscores, no spaces).
_GO_DECIMAL = re.compile(r"[+-]?[0-9]+")
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
# A line break plus the indentation around it, as left behind when a long annotation is wrapped
# in a manifest or a copy-pasted document; YAML folding turns exactly this into one space.
_LINE_BREAK = re.compile(r"[ \t]*(?:\r\n|\r|\n)\s*")


def parse_go_bool(text: str) -> bool | None:
    """``strconv.ParseBool``: the twelve accepted spellings, else ``None``."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    return None


def parse_go_int(text: str, *, low: int, high: int) -> int | None:
    """``strconv.ParseInt(text, 10, n)`` restricted to ``[low, high]``; ``None`` when invalid."""
    if not _GO_DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if low <= number <= high else None


def fold_line_breaks(text: str) -> str:
    """Replace every line break (with its surrounding indentation) by a single space."""
    return _LINE_BREAK.sub(" ", text)


def has_line_break(text: str) -> bool:
    return "\n" in text or "\r" in text


# --- JSON with encoding/json semantics -----------------------------------------------------------


class GoJSONError(ValueError):
    """The text is not a JSON document Go's ``encoding/json`` would accept."""


@dataclass(frozen=True, slots=True, repr=False)
class JSONFloat:
    """A JSON number token with a fraction or exponent: never a Go integer."""

    token: str

    def __repr__(self) -> str:
        return self.token


@dataclass(frozen=True, slots=True)
class JSONObject:
    """A decoded JSON object, keeping every key/value pair in document order."""

    pairs: tuple[tuple[str, object], ...]

    def go_fields(self, names: tuple[str, ...]) -> dict[str, object]:
        """Map this object onto struct fields the way ``encoding/json`` does.

        Keys match a field exactly or, failing that, ASCII-case-insensitively; unknown keys are
        ignored; a repeated key overwrites the earlier one; ``null`` changes nothing.
        """
        exact = set(names)
        folded = {name.lower(): name for name in names}
        found: dict[str, object] = {}
        for raw_key, item in self.pairs:
            name = raw_key if raw_key in exact else folded.get(_ascii_lower(raw_key))
            if name is not None and item is not None:
                found[name] = item
        return found


def _ascii_lower(text: str) -> str:
    return text.lower() if text.isascii() else text


def load_go_json(text: str) -> object:
    """Parse ``text`` into lists, :class:`JSONObject`, scalars and :class:`JSONFloat`."""
    try:
        return json.loads(
            text,
            object_pairs_hook=lambda pairs: JSONObject(tuple(pairs)),
            parse_float=JSONFloat,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError) as exc:
        raise GoJSONError(str(exc)) from None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def go_json_int(item: object, *, low: int, high: int) -> int | None:
    """A JSON integer token within ``[low, high]`` (bools and fractions rejected), else ``None``."""
    if type(item) is int and low <= item <= high:
        return item
    return None


_GO_HTML_ESCAPES: Final = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_HTML_ESCAPE_RE = re.compile("[<>&\u2028\u2029]")


def dump_go_json(document: object) -> str:
    """Serialise like Go's ``json.Marshal``: compact, raw UTF-8, HTML-sensitive runes escaped.

    Only string content can hold the escaped characters (our keys are plain ASCII), so escaping
    after serialisation is safe.
    """
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return _GO_HTML_ESCAPE_RE.sub(lambda match: _GO_HTML_ESCAPES[match.group()], text)


class JSONReader:
    """Typed field access on a decoded document; failures are DecodeErrors naming the path."""

    def __init__(self, key: str, value: str) -> None:
        self.key = key
        self.value = value

    def load(self) -> object:
        try:
            return load_go_json(self.value)
        except GoJSONError as exc:
            raise DecodeError(self.key, self.value, f"invalid JSON: {exc}") from None

    def fail(self, where: str, reason: str) -> DecodeError:
        return DecodeError(self.key, self.value, f"{where}: {reason}")

    def obj_fields(self, item: object, where: str, names: tuple[str, ...]) -> dict[str, object]:
        if not isinstance(item, JSONObject):
            raise self.fail(where, "expected a JSON object")
        return item.go_fields(names)

    def array_items(self, item: object, where: str) -> list[object]:
        """A JSON array; ``null`` reads as empty (Go decodes it to a nil slice)."""
        if item is None:
            return []
        if not isinstance(item, list):
            raise self.fail(where, "expected a JSON array")
        return item

    def integer(self, fields: dict[str, object], name: str, where: str, low: int, high: int) -> int:
        item = fields.get(name, 0)
        parsed = go_json_int(item, low=low, high=high)
        if parsed is None:
            raise self.fail(where, f"{name} must be an integer in [{low}, {high}], got {item!r}")
        return parsed

    def text(self, fields: dict[str, object], name: str, where: str) -> str:
        item = fields.get(name, "")
        if not isinstance(item, str):
            raise self.fail(where, f"{name} must be a string, got {item!r}")
        return item

    def flag(self, fields: dict[str, object], name: str, where: str) -> bool:
        item = fields.get(name, False)
        if not isinstance(item, bool):
            raise self.fail(where, f"{name} must be a boolean, got {item!r}")
        return item


# --- encoder-side validation ----------------------------------------------------------------


def check_int(where: str, name: str, number: int, low: int, high: int) -> None:
    """Raise ValidationError unless ``number`` is a real int (not bool) in ``[low, high]``."""
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise ValidationError(where, number, f"{name} must be an integer in [{low}, {high}]")


def check_text(where: str, name: str, text: str, *, forbidden: str = "") -> None:
    """Raise ValidationError unless ``text`` is UTF-8 encodable and, when ``forbidden`` is given,
    free of those characters, of line breaks and of leading/trailing whitespace."""
    if not isinstance(text, str):
        raise ValidationError(where, text, f"{name} must be a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(where, text, f"{name} is not valid Unicode text") from None
    if forbidden and (any(ch in text for ch in forbidden) or has_line_break(text)):
        raise ValidationError(where, text, f"{name} must not contain {forbidden!r} or line breaks")
    if forbidden and text != text.strip():
        raise ValidationError(where, text, f"{name} must not start or end with whitespace")
