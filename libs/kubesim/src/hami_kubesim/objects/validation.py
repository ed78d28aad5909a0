"""Object-meta validation shared by every kind: names, labels, immutable fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Cause = tuple[str, str, str]  # (field, reason, message)

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    r"used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def quote(value: Any) -> str:
    """Render a value the way field errors do (``"x"`` for strings)."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if value is None:
        return "null"
    return str(value)


def invalid(field: str, value: Any, detail: str) -> Cause:
    return (field, "FieldValueInvalid", f"Invalid value: {quote(value)}: {detail}")


def required(field: str, detail: str = "") -> Cause:
    return (field, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def forbidden(field: str, detail: str) -> Cause:
    return (field, "FieldValueForbidden", f"Forbidden: {detail}")


def duplicate(field: str, value: Any) -> Cause:
    return (field, "FieldValueDuplicate", f"Duplicate value: {quote(value)}")


def unsupported(field: str, value: Any, supported: tuple[str, ...]) -> Cause:
    values = ", ".join(quote(s) for s in supported)
    return (
        field,
        "FieldValueNotSupported",
        f"Unsupported value: {quote(value)}: supported values: {values}",
    )


def too_many(field: str, count: int, limit: int) -> Cause:
    """``field.TooMany``: the list is longer than ``limit``."""
    items = "item" if limit == 1 else "items"
    return (field, "FieldValueTooMany", f"Too many: {count}: must have at most {limit} {items}")


def too_long(field: str, limit: int) -> Cause:
    """``field.TooLong`` (the value itself is not printed)."""
    unit = "byte" if limit == 1 else "bytes"
    return (field, "FieldValueTooLong", f"Too long: may not be more than {limit} {unit}")


def not_found(field: str, value: Any, detail: str = "") -> Cause:
    return (
        field,
        "FieldValueNotFound",
        f"Not found: {quote(value)}" + (f": {detail}" if detail else ""),
    )


def is_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(_SUBDOMAIN.match(name))


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_LABEL.match(name))


def validate_name(name: str, *, dns_label: bool = False) -> list[Cause]:
    if dns_label and not is_dns_label(name):
        return [invalid("metadata.name", name, LABEL_MSG)]
    if not dns_label and not is_subdomain(name):
        return [invalid("metadata.name", name, SUBDOMAIN_MSG)]
    return []


def _qualified_name(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and not is_subdomain(prefix):
        return "prefix part " + SUBDOMAIN_MSG
    if not name or len(name) > 63 or not _QUALIFIED.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return None


def validate_meta_maps(meta: Mapping[str, Any]) -> list[Cause]:
    """Labels must be qualified names with valid values; annotation keys qualified names."""
    causes: list[Cause] = []
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, Mapping):
        causes.append(invalid("metadata.labels", labels, "must be a map of strings"))
    for key, value in (labels or {}).items():
        why = _qualified_name(key)
        if why:
            causes.append(invalid("metadata.labels", key, why))
        elif not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                invalid(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character",
                )
            )
    annotations = meta.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        causes.append(invalid("metadata.annotations", annotations, "must be a map of strings"))
    for key, value in (annotations or {}).items():
        why = _qualified_name(key)
        if why:
            causes.append(invalid("metadata.annotations", key, why))
        elif not isinstance(value, str):
            causes.append(invalid(f"metadata.annotations[{key}]", value, "must be a string"))
    return causes
