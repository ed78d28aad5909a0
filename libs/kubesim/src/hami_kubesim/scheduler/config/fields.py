"""The scalar fields of a KubeSchedulerConfiguration: strict key sets, strings, booleans, base64
PEM data, string lists, seconds and Go durations, each checked as kube-scheduler checks it (a
wrong one raises :class:`~hami_protocol.errors.ConfigError` naming the field)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from hami_protocol.durations import parse_go_duration
from hami_protocol.errors import ConfigError


def parse_duration(value: object, field: str = "") -> float:
    """A Go duration string (``30s``, ``1m30s``, ``500ms``) in seconds."""
    if not isinstance(value, str):
        raise ConfigError(field, value, "a duration must be a string such as '30s'")
    if not value.strip():
        return 0.0
    try:
        return parse_go_duration(value, bare_seconds=False)
    except ValueError:
        raise ConfigError(field, value, "invalid duration (expected e.g. '30s', '1m30s')") from None


def check_keys(raw: Mapping[str, Any], allowed: frozenset[str], field: str) -> None:
    unknown = sorted(str(key) for key in raw if key not in allowed)
    if unknown:
        raise ConfigError(field or "(top level)", unknown, "unknown field(s)")


def string_field(raw: object, field: str) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise ConfigError(field, raw, "must be a string")
    return raw


def bool_field(raw: object, field: str) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise ConfigError(field, raw, "must be true or false")
    return raw


def b64_field(raw: object, field: str) -> bytes:
    if raw is None or raw == "":
        return b""
    if not isinstance(raw, str):
        raise ConfigError(field, raw, "must be base64 text")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(field, raw, f"invalid base64: {exc}") from exc


def str_list_field(raw: object, field: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ConfigError(field, raw, "must be a list of strings")
    return list(raw)


def positive_seconds(raw: object, field: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw <= 0:
        raise ConfigError(field, raw, "must be a positive number of seconds")
    return float(raw)
