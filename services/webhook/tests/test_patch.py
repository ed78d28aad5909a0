"""The JSON Patch diff: pointer escaping, minimal operations, and applying cleanly (jsonpatch)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_webhook.mutation.patch import copy_json, diff, escape, pointer, same


@pytest.mark.parametrize(
    ("segment", "escaped"),
    [
        ("nvidia.com/gpu", "nvidia.com~1gpu"),
        ("a~b", "a~0b"),
        ("~/", "~0~1"),
        ("~1", "~01"),  # "~" is escaped first, so "~1" does not turn into "/"
        ("", ""),
        ("plain", "plain"),
    ],
)
def test_escape(segment: str, escaped: str) -> None:
    assert escape(segment) == escaped


def test_pointer_joins_escaped_segments() -> None:
    assert pointer("metadata", "annotations", "hami.io/x") == "/metadata/annotations/hami.io~1x"
    assert pointer("spec", "containers", 0) == "/spec/containers/0"
    assert pointer() == ""


CASES: list[tuple[str, Any, Any, list[dict[str, Any]]]] = [
    ("equal", {"a": 1}, {"a": 1}, []),
    ("new key", {"a": 1}, {"a": 1, "b": 2}, [{"op": "add", "path": "/b", "value": 2}]),
    ("removed key", {"a": 1, "b": 2}, {"a": 1}, [{"op": "remove", "path": "/b"}]),
    ("changed scalar", {"a": 1}, {"a": 2}, [{"op": "replace", "path": "/a", "value": 2}]),
    (
        "annotations created with their content",
        {"metadata": {"name": "p"}},
        {"metadata": {"name": "p", "annotations": {"hami.io/x": "1"}}},
        [{"op": "add", "path": "/metadata/annotations", "value": {"hami.io/x": "1"}}],
    ),
    (
        "key with slash and tilde",
        {"m": {}},
        {"m": {"a/b~c": 1}},
        [{"op": "add", "path": "/m/a~1b~0c", "value": 1}],
    ),
    (
        "list grows at the end",
        {"env": [{"name": "A"}]},
        {"env": [{"name": "A"}, {"name": "B"}, {"name": "C"}]},
        [
            {"op": "add", "path": "/env/1", "value": {"name": "B"}},
            {"op": "add", "path": "/env/2", "value": {"name": "C"}},
        ],
    ),
    (
        "element changed in place",
        {"env": [{"name": "A", "value": "1"}]},
        {"env": [{"name": "A", "value": "2"}]},
        [{"op": "replace", "path": "/env/0/value", "value": "2"}],
    ),
    (
        "list shrinks: replaced",
        {"l": [1, 2, 3]},
        {"l": [1, 2]},
        [{"op": "replace", "path": "/l", "value": [1, 2]}],
    ),
    (
        "bool is not int",
        {"a": 1},
        {"a": True},
        [{"op": "replace", "path": "/a", "value": True}],
    ),
    (
        "type change object to list",
        {"a": {}},
        {"a": []},
        [{"op": "replace", "path": "/a", "value": []}],
    ),
    ("root scalar", 1, 2, [{"op": "replace", "path": "", "value": 2}]),
]


@pytest.mark.parametrize(
    ("old", "new", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_diff_is_minimal(old: Any, new: Any, expected: list[dict[str, Any]]) -> None:
    ops = diff(old, new)
    assert ops == expected
    assert jsonpatch.apply_patch(old, ops) == new


def test_diff_values_are_copies() -> None:
    new = {"a": {"b": [1]}}
    ops = diff({}, new)
    new["a"]["b"].append(2)
    assert ops == [{"op": "add", "path": "/a", "value": {"b": [1]}}]


def test_copy_json_is_deep_and_equal() -> None:
    original = {"a": [{"b": 1}, "x", None, 1.5, True]}
    copied = copy_json(original)
    assert copied == original
    copied["a"][0]["b"] = 2
    assert original["a"][0]["b"] == 1


json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "a", "~", "/"])
json_keys = st.sampled_from(["a", "b", "c/d", "e~f", "~", "/", ""])
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(json_keys, children, max_size=4)
    ),
    max_leaves=12,
)


@given(old=json_values, new=json_values)
def test_applying_the_diff_yields_the_target(old: Any, new: Any) -> None:
    before = copy.deepcopy(old)
    ops = diff(old, new)
    result = jsonpatch.apply_patch(old, ops)
    assert same(result, new)
    assert same(old, before)  # the inputs are not modified
    if same(old, new):
        assert ops == []


@given(doc=json_values)
def test_a_document_and_its_copy_have_no_diff(doc: Any) -> None:
    assert diff(doc, copy_json(doc)) == []
