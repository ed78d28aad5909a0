"""A minimal RFC 6902 JSON Patch between two JSON documents.

:func:`diff` walks the original and the mutated document together and emits only what changed:

* an object key that is new is one ``add`` of its whole value, so a missing parent such as
  ``/metadata/annotations`` is created by the same operation that fills it;
* a key that disappeared is a ``remove``; a changed scalar is a ``replace``;
* a list that only grew (the original is a prefix) gets one ``add`` per new element at its index;
  a list of the same length is compared element by element; any other list change replaces the
  list.

Values are compared by JSON type as well as value, so ``1`` → ``true`` or ``1`` → ``1.0`` is a
change (Python would call them equal).  Pointer segments escape ``~`` as ``~0`` and ``/`` as
``~1`` (RFC 6901), so ``nvidia.com/gpu`` becomes ``nvidia.com~1gpu``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["PatchOp", "copy_json", "diff", "escape", "pointer"]


class PatchOp(TypedDict):
    """One JSON Patch operation (only the three this module emits)."""

    op: Literal["add", "remove", "replace"]
    path: str
    value: NotRequired[Any]


def escape(segment: str) -> str:
    """One JSON Pointer reference token: ``~`` → ``~0`` first, then ``/`` → ``~1``."""
    if "~" not in segment and "/" not in segment:
        return segment
    return segment.replace("~", "~0").replace("/", "~1")


def pointer(*segments: str | int) -> str:
    """A JSON Pointer from raw (unescaped) segments: ``pointer("a/b", 0)`` → ``/a~1b/0``."""
    return "".join(f"/{escape(str(segment))}" for segment in segments)


def copy_json(value: Any) -> Any:
    """A deep copy of decoded JSON (dicts, lists, scalars); several times faster than deepcopy."""
    if type(value) is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if type(value) is list:
        return [copy_json(item) for item in value]
    return value


def same(a: Any, b: Any) -> bool:
    """JSON equality that also requires the same JSON type at every level."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def diff(original: Any, mutated: Any) -> list[PatchOp]:
    """The operations that turn ``original`` into ``mutated`` (empty when they are equal)."""
    ops: list[PatchOp] = []
    _diff(original, mutated, "", ops)
    return ops


def _diff(old: Any, new: Any, path: str, ops: list[PatchOp]) -> None:
    if old is new:
        return
    if type(old) is dict and type(new) is dict:
        _diff_objects(old, new, path, ops)
    elif type(old) is list and type(new) is list:
        _diff_lists(old, new, path, ops)
    elif not same(old, new):
        ops.append({"op": "replace", "path": path, "value": copy_json(new)})


def _diff_objects(old: dict[str, Any], new: dict[str, Any], path: str, ops: list[PatchOp]) -> None:
    for key in old:
        if key not in new:
            ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
    for key, value in new.items():
        if key not in old:
            ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": copy_json(value)})
        elif old[key] is not value:
            _diff(old[key], value, f"{path}/{escape(key)}", ops)


def _diff_lists(old: Sequence[Any], new: Sequence[Any], path: str, ops: list[PatchOp]) -> None:
    if len(new) == len(old):
        for index, (before, after) in enumerate(zip(old, new, strict=True)):
            _diff(before, after, f"{path}/{index}", ops)
        return
    if len(new) > len(old) and all(same(a, b) for a, b in zip(old, new, strict=False)):
        for index in range(len(old), len(new)):
            ops.append({"op": "add", "path": f"{path}/{index}", "value": copy_json(new[index])})
        return
    ops.append({"op": "replace", "path": path, "value": copy_json(new)})
