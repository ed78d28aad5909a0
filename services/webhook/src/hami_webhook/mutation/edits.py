"""Reading and editing one container of a decoded pod: resource lookups (limits first, then
requests), quantities rounded like Go's ``Quantity.Value()``, and in-place edits of ``env``,
``resources.limits`` and ``resources.requests``.  Pure helpers shared by the NVIDIA defaults,
the vendor rules and the capacity totals."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from hami_kube.objects import ContainerView
from hami_protocol.request.quantity import json_quantity, to_int_ceil

__all__ = [
    "Sections",
    "add_env_if_absent",
    "mapping",
    "present",
    "raw_value",
    "sections",
    "set_env",
    "set_limit",
    "set_quantity",
    "value",
]

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})

Sections = tuple[Mapping[str, Any], Mapping[str, Any]]


def mapping(item: object) -> Mapping[str, Any]:
    if type(item) is dict:  # decoded JSON: skip the slower ABC check
        return item
    if item is None:
        return _EMPTY
    return item if isinstance(item, Mapping) else _EMPTY


def sections(ctr: ContainerView) -> Sections:
    """``(limits, requests)`` read once through the view; read again after editing them."""
    return ctr.limits, ctr.requests


def present(where: Sections, name: str | None) -> bool:
    limits, requests = where
    return bool(name) and (name in limits or name in requests)


def raw_value(where: Sections, name: str | None) -> object | None:
    """The resource's raw JSON value, limits first; ``None`` if absent."""
    if not name:
        return None
    limits, requests = where
    found: object | None = limits.get(name, requests.get(name))
    return found


def value(where: Sections, name: str | None) -> int | None:
    """The resource rounded up like Go's ``Quantity.Value()``, limits first; None if absent."""
    raw = raw_value(where, name)
    return None if raw is None or name is None else to_int_ceil(json_quantity(raw, key=name))


def set_env(ctr: dict[str, Any], name: str, text: str) -> None:
    """Set ``name`` to ``text``: an entry with another value is replaced in place."""
    env = ctr.get("env")
    if not isinstance(env, list):
        ctr["env"] = env = []
    wanted = {"name": name, "value": text}
    for index in range(len(env) - 1, -1, -1):
        entry = env[index]
        if isinstance(entry, dict) and entry.get("name") == name:
            if entry != wanted:
                env[index] = wanted
            return
    env.append(wanted)


def add_env_if_absent(ctr: dict[str, Any], name: str, text: str) -> None:
    """Append ``name=text`` unless the container already sets ``name`` (whatever its value)."""
    env = ctr.get("env")
    if isinstance(env, list) and any(
        isinstance(entry, dict) and entry.get("name") == name for entry in env
    ):
        return
    set_env(ctr, name, text)


def set_quantity(ctr: dict[str, Any], section: str, name: str, text: str) -> None:
    """``resources.<section>.<name> = text`` (``section`` is ``limits`` or ``requests``)."""
    resources = ctr.get("resources")
    if not isinstance(resources, dict):
        ctr["resources"] = resources = {}
    values = resources.get(section)
    if not isinstance(values, dict):
        resources[section] = values = {}
    if values.get(name) != text:
        values[name] = text


def set_limit(ctr: dict[str, Any], name: str, number: int) -> None:
    set_quantity(ctr, "limits", name, str(number))
