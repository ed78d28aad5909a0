"""Typed field readers for configuration documents (YAML device config, JSON node config).

Each reader takes the parsed mapping, the field name and the dotted path of the mapping, and
either returns a value of the promised type or raises :class:`ConfigError` naming the full
field path (``nvidia.deviceSplitCount``) and quoting the value.  An absent key or an explicit
``null`` yields the default, as Go's decoders leave the field untouched in both cases.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Final, TypeVar

from hami_protocol.errors import ConfigError

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

T = TypeVar("T")


def join(path: str, key: str | int) -> str:
    """``nvidia`` + ``deviceSplitCount`` → ``nvidia.deviceSplitCount``; ints become ``[i]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def as_mapping(value: object, path: str) -> Mapping[str, object]:
    """A mapping with string keys; ``None`` counts as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(path, value, "expected a mapping")
    for key in value:
        if not isinstance(key, str):
            raise ConfigError(path, key, "mapping keys must be strings")
    return value


def as_list(value: object, path: str) -> list[object]:
    """A list; ``None`` counts as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(path, value, "expected a list")
    return value


def unknown_keys(data: Mapping[str, object], known: Iterable[str], path: str) -> list[str]:
    """Warnings for keys the reader does not know (tolerated, as HAMi ignores them)."""
    known_set = set(known)
    return [f"unknown key {join(path, key)}" for key in data if key not in known_set]


def get_str(data: Mapping[str, object], key: str, path: str, default: str) -> str:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ConfigError(join(path, key), value, "expected a string")
    return value


def get_required_str(data: Mapping[str, object], key: str, path: str, default: str) -> str:
    """A text field that may not be empty (a resource name, say)."""
    value = get_str(data, key, path, default)
    if not value:
        raise ConfigError(join(path, key), value, "must not be empty")
    return value


def get_name(data: Mapping[str, object], key: str, path: str, default: str | None) -> str | None:
    """A resource name; an empty string means "not configured" (``None``)."""
    value = get_str(data, key, path, default or "")
    return value or None


def get_int(
    data: Mapping[str, object],
    key: str,
    path: str,
    default: int,
    *,
    minimum: int = 0,
    maximum: int = INT32_MAX,
) -> int:
    value = get_opt_int(data, key, path, minimum=minimum, maximum=maximum)
    return default if value is None else value


def get_opt_int(
    data: Mapping[str, object],
    key: str,
    path: str,
    *,
    minimum: int = 0,
    maximum: int = INT32_MAX,
) -> int | None:
    """An integer in ``[minimum, maximum]``; integral floats (``10.0``) are accepted."""
    value = data.get(key)
    if value is None:
        return None
    where = join(path, key)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(where, value, "expected an integer")
    if not minimum <= value <= maximum:
        raise ConfigError(where, value, f"must be between {minimum} and {maximum}")
    return value


def get_opt_positive_float(data: Mapping[str, object], key: str, path: str) -> float | None:
    """A finite number greater than zero (ints accepted)."""
    value = data.get(key)
    if value is None:
        return None
    where = join(path, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(where, value, "expected a number")
    try:
        number = float(value)
    except OverflowError:
        raise ConfigError(where, value, "number out of range") from None
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(where, value, "must be a finite number greater than 0")
    return number


def get_bool(data: Mapping[str, object], key: str, path: str, default: bool) -> bool:
    value = get_opt_bool(data, key, path)
    return default if value is None else value


def get_opt_bool(data: Mapping[str, object], key: str, path: str) -> bool | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ConfigError(join(path, key), value, "expected true or false")
    return value


def get_choice(
    data: Mapping[str, object],
    key: str,
    path: str,
    choices: tuple[str, ...],
) -> str | None:
    """One of ``choices``; integers are compared by their decimal text (``1`` → ``"1"``)."""
    value = data.get(key)
    if value is None:
        return None
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or text not in choices:
        raise ConfigError(join(path, key), value, f"must be one of {', '.join(choices)}")
    return text


def get_str_tuple(data: Mapping[str, object], key: str, path: str) -> tuple[str, ...]:
    where = join(path, key)
    items = as_list(data.get(key), where)
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise ConfigError(join(where, index), item, "expected a string")
    return tuple(str(item) for item in items)


def get_int_tuple(
    data: Mapping[str, object], key: str, path: str, *, maximum: int = INT64_MAX
) -> tuple[int, ...]:
    where = join(path, key)
    items = as_list(data.get(key), where)
    result: list[int] = []
    for index, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= maximum:
            raise ConfigError(join(where, index), item, "expected a non-negative integer")
        result.append(item)
    return tuple(result)
