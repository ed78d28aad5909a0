"""PATCH bodies: JSON merge patch, strategic merge patch for built-in kinds, JSON patch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.objects.patching import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_PATCH,
    apply_patch,
    media_type,
    merge_patch,
    strategic_merge_patch,
)

POD: dict[str, Any] = {
    "metadata": {"name": "p", "annotations": {"a": "1", "b": "2"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {"name": "main", "image": "img:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "side:1"},
        ],
        "tolerations": [{"key": "k"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "False"}]},
}


def test_annotations_merge_same_for_merge_and_strategic() -> None:
    patch = {"metadata": {"annotations": {"a": "9", "b": None, "c": "3"}}}
    for result in (merge_patch(POD, patch), strategic_merge_patch("Pod", POD, patch)):
        assert result["metadata"]["annotations"] == {"a": "9", "c": "3"}
    assert POD["metadata"]["annotations"] == {"a": "1", "b": "2"}  # original untouched


def test_merge_patch_replaces_lists() -> None:
    result = merge_patch(POD, {"spec": {"containers": [{"name": "main", "image": "img:2"}]}})
    assert result["spec"]["containers"] == [{"name": "main", "image": "img:2"}]


def test_strategic_merges_containers_by_name() -> None:
    patch = {
        "spec": {
            "containers": [{"name": "main", "image": "img:2", "env": [{"name": "B", "value": "2"}]}]
        }
    }
    result = strategic_merge_patch("Pod", POD, patch)
    main, side = result["spec"]["containers"]
    assert main["image"] == "img:2"
    assert main["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert side == {"name": "side", "image": "side:1"}
    assert result["spec"]["tolerations"] == [{"key": "k"}]


def test_strategic_directives() -> None:
    deleted = strategic_merge_patch(
        "Pod", POD, {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}
    )
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["main"]
    replaced = strategic_merge_patch("Pod", POD, {"spec": {"$patch": "replace", "containers": []}})
    assert replaced["spec"] == {"containers": []}
    order = strategic_merge_patch(
        "Pod", POD, {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}]}}
    )
    assert [c["name"] for c in order["spec"]["containers"]] == ["side", "main"]
    fin = strategic_merge_patch("Pod", POD, {"metadata": {"finalizers": ["y", "x"]}})
    assert fin["metadata"]["finalizers"] == ["x", "y"]
    gone = strategic_merge_patch(
        "Pod", POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}
    )
    assert gone["metadata"]["finalizers"] == []
    retained = strategic_merge_patch(
        "Pod", POD, {"spec": {"$retainKeys": ["containers"], "containers": []}}
    )
    assert set(retained["spec"]) == {"containers"}


def test_strategic_conditions_by_type() -> None:
    patch = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
            ]
        }
    }
    result = strategic_merge_patch("Pod", POD, patch)
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_strategic_missing_merge_key_is_bad_request() -> None:
    with pytest.raises(StatusError) as info:
        strategic_merge_patch("Pod", POD, {"spec": {"containers": [{"image": "x"}]}})
    assert info.value.code == 400


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "replace", "path": "/metadata/missing/x", "value": 1}], 422),
        ([{"op": "test", "path": "/metadata/name", "value": "other"}], 422),
        ([{"op": "frobnicate", "path": "/x"}], 400),
        ({"not": "a list"}, 400),
        ([{"op": "add", "path": "/x", "value": 1}] * 10001, 413),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    with pytest.raises(StatusError) as info:
        apply_patch("Pod", POD, JSON_PATCH, ops)
    assert info.value.code == code


def test_json_patch_applies_in_order() -> None:
    result = apply_patch(
        "Pod",
        POD,
        JSON_PATCH,
        [
            {"op": "add", "path": "/metadata/labels", "value": {"x": "1"}},
            {"op": "replace", "path": "/spec/containers/1/image", "value": "side:2"},
            {"op": "remove", "path": "/metadata/annotations/a"},
        ],
    )
    assert result["metadata"]["labels"] == {"x": "1"}
    assert result["spec"]["containers"][1]["image"] == "side:2"
    assert result["metadata"]["annotations"] == {"b": "2"}
    assert POD["spec"]["containers"][1]["image"] == "side:1"


def test_media_type_and_unknown_type() -> None:
    assert media_type("application/merge-patch+json; charset=utf-8") == MERGE_PATCH
    with pytest.raises(StatusError) as info:
        apply_patch("Pod", POD, "text/plain", {})
    assert info.value.code == 415
    assert apply_patch("Pod", POD, STRATEGIC_PATCH, {}) == POD


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=3), json_values, max_size=4)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


@given(json_objects, json_objects)
def test_merge_patch_rfc7386_properties(target: dict[str, Any], patch: dict[str, Any]) -> None:
    result = merge_patch(target, patch)
    for key, value in patch.items():
        if value is None:
            assert key not in result
        elif not isinstance(value, dict):
            assert result[key] == value
    assert merge_patch(result, patch) == result  # idempotent
    assert merge_patch({}, patch) == _without_nulls(patch)


@given(json_objects, json_objects)
def test_strategic_equals_merge_without_list_keys(
    target: dict[str, Any], patch: dict[str, Any]
) -> None:
    """ConfigMaps have no merge keys: without directives the two patch types agree."""
    assume("$" not in repr(patch))
    assert strategic_merge_patch("ConfigMap", target, patch) == merge_patch(target, patch)


def error_code(call: Callable[[], object]) -> int | None:
    try:
        call()
    except StatusError as err:
        return err.code
    return None


@given(json_objects, st.one_of(json_values, json_objects, st.lists(json_objects, max_size=3)))
def test_garbage_patches_only_raise_api_errors(target: dict[str, Any], body: Any) -> None:
    original = {"metadata": {"name": "x"}, **target}
    for ctype in (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH):
        code = error_code(lambda ctype=ctype: apply_patch("Pod", original, ctype, body))
        assert code is None or 400 <= code < 500
