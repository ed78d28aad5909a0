"""The cluster file's scalar checks: each returns the value typed (a mapping, a list, a non-empty
string, a string map, a boolean, a port, seconds, a count) or raises
:class:`~.spec.ClusterConfigError` naming the key and the bad value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_kubesim.cluster.spec import ClusterConfigError


def as_mapping(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ClusterConfigError(key, value, "must be a mapping")
    return value


def as_list(key: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise ClusterConfigError(key, value, "must be a list")
    return value


def as_str(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ClusterConfigError(key, value, "must be a non-empty string")
    return value


def as_strings(key: str, value: object) -> dict[str, str]:
    mapping = as_mapping(key, value)
    out: dict[str, str] = {}
    for name, item in mapping.items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ClusterConfigError(f"{key}.{name}", item, "must be a string or a number")
        out[str(name)] = str(item)
    return out


def as_bool(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ClusterConfigError(key, value, "must be true or false")
    return value


def as_port(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ClusterConfigError(key, value, "must be a port number 0-65535")
    return value


def as_seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ClusterConfigError(key, value, "must be a non-negative number of seconds")
    return float(value)


def as_positive_seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ClusterConfigError(key, value, "must be a positive number of seconds")
    return float(value)


def as_count(key: str, value: object, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ClusterConfigError(key, value, f"must be an integer >= {low}")
    return value
