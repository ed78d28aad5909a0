"""AdmissionReview request building, reply verification, patches and error texts."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.admission.match import RequestAttributes
from hami_kubesim.admission.review import (
    CallingError,
    PatchApplyError,
    apply_json_patch,
    build_review,
    choose_review_version,
    default_user_info,
    kind_for,
    rejection_from_status,
    verify_response,
)

ATTRS = RequestAttributes(operation="CREATE", group="", version="v1", resource="pods")
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"containers": [{"name": "c"}]},
}


def b64(ops: Any) -> str:
    return base64.b64encode(json.dumps(ops).encode()).decode()


def reply(version: str = "v1", **response: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"admission.k8s.io/{version}",
        "kind": "AdmissionReview",
        "response": response,
    }


def test_build_review_v1_fields() -> None:
    review = build_review(
        version="v1",
        uid="u-1",
        attrs=ATTRS,
        kind=kind_for("pods", POD),
        obj=POD,
        old_obj=None,
        namespace="ns",
        user_info=default_user_info(),
    )
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    request = review["request"]
    assert request["uid"] == "u-1"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["requestKind"] == request["kind"]
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["requestResource"] == request["resource"]
    assert "subResource" not in request
    assert request["name"] == "p"
    assert request["namespace"] == "ns"
    assert request["operation"] == "CREATE"
    assert request["userInfo"]["username"] == "kubernetes-admin"
    assert request["object"] == POD
    assert request["object"] is not POD
    assert request["oldObject"] is None
    assert request["dryRun"] is False
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}


def test_generate_name_leaves_name_out() -> None:
    pod = {"metadata": {"generateName": "job-", "namespace": "ns"}}
    review = build_review(
        version="v1beta1",
        uid="u",
        attrs=ATTRS,
        kind=kind_for("pods", pod),
        obj=pod,
        old_obj=None,
        namespace="ns",
        user_info={},
    )
    assert review["apiVersion"] == "admission.k8s.io/v1beta1"
    assert "name" not in review["request"]
    assert review["request"]["kind"]["kind"] == "Pod"


def test_choose_review_version() -> None:
    assert choose_review_version(["v1", "v1beta1"]) == "v1"
    assert choose_review_version(["v2", "v1beta1"]) == "v1beta1"
    with pytest.raises(CallingError, match="does not accept"):
        choose_review_version(["v2"])


def test_verify_allowed_with_patch() -> None:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    result = verify_response(
        reply(uid="u", allowed=True, patchType="JSONPatch", patch=b64(ops), warnings=["w"]),
        uid="u",
        version="v1",
    )
    assert result.allowed
    assert result.patch == tuple(ops)
    assert result.warnings == ("w",)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            "webhook response was absent",
        ),
        (reply(uid="other", allowed=True), 'expected response.uid="u", got "other"'),
        (
            reply("v1beta1", uid="u", allowed=True),
            "expected webhook response of admission.k8s.io/v1",
        ),
        (reply(uid="u", allowed=True, patch=b64([])), "response.patch but not response.patchType"),
        (
            reply(uid="u", allowed=True, patchType="JSONPatch"),
            "response.patchType but not response.patch",
        ),
        (
            reply(uid="u", allowed=True, patchType="Merge", patch=b64([])),
            "invalid response.patchType",
        ),
        (reply(uid="u", allowed=True, patchType="JSONPatch", patch="***"), "not base64"),
        (
            reply(
                uid="u",
                allowed=True,
                patchType="JSONPatch",
                patch=base64.b64encode(b"{no").decode(),
            ),
            "undecodable patch",
        ),
        (
            reply(uid="u", allowed=True, patchType="JSONPatch", patch=b64({"op": "add"})),
            "undecodable patch",
        ),
        ("not an object", "not a JSON object"),
    ],
)
def test_invalid_v1_replies(body: Any, fragment: str) -> None:
    with pytest.raises(CallingError) as info:
        verify_response(body, uid="u", version="v1")
    assert fragment in str(info.value)


def test_v1beta1_is_lenient() -> None:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {}}]
    body = {"response": {"uid": "whatever", "allowed": True, "patch": b64(ops)}}
    result = verify_response(body, uid="u", version="v1beta1")
    assert result.patch == tuple(ops)


def test_missing_allowed_means_denied() -> None:
    assert not verify_response(reply(uid="u"), uid="u", version="v1").allowed


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (
            {"code": 403, "message": "no GPUs for you"},
            403,
            'admission webhook "w.io" denied the request: no GPUs for you',
        ),
        ({"code": 200, "message": "x"}, 400, 'admission webhook "w.io" denied the request: x'),
        ({"reason": "Forbidden"}, 400, 'admission webhook "w.io" denied the request: Forbidden'),
        (None, 400, 'admission webhook "w.io" denied the request without explanation'),
    ],
)
def test_rejection(status: Any, code: int, message: str) -> None:
    rejection = rejection_from_status("w.io", status)
    assert (rejection.code, rejection.message) == (code, message)


def test_apply_patch_in_order_with_escaped_keys() -> None:
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/example.com~1gpu", "value": "1"},
        {"op": "replace", "path": "/spec/containers/0/name", "value": "main"},
        {"op": "add", "path": "/spec/containers/-", "value": {"name": "side"}},
    ]
    patched = apply_json_patch(POD, ops)
    assert patched["metadata"]["annotations"] == {"example.com/gpu": "1"}
    assert [c["name"] for c in patched["spec"]["containers"]] == ["main", "side"]
    assert POD["spec"] == {"containers": [{"name": "c"}]}  # the input is left alone


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}],
        [{"op": "remove", "path": "/nope"}],
        [{"op": "test", "path": "/kind", "value": "Node"}],
        [{"op": "frobnicate", "path": "/kind"}],
        [{"op": "replace", "path": "", "value": [1]}],
    ],
)
def test_patch_that_does_not_apply(ops: list[dict[str, Any]]) -> None:
    with pytest.raises(PatchApplyError):
        apply_json_patch(POD, ops)


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "x"]),
                "path": st.sampled_from(
                    [
                        "",
                        "/",
                        "/metadata",
                        "/metadata/name",
                        "/spec/containers/0",
                        "/a~1b",
                        "/spec/containers/-",
                    ]
                ),
                "value": st.none() | st.integers() | st.text(max_size=3),
                "from": st.sampled_from(["/metadata", "/kind", "/zzz"]),
            }
        ),
        max_size=4,
    )
)
def test_arbitrary_patches_raise_only_patch_apply_error(ops: list[dict[str, Any]]) -> None:
    with contextlib.suppress(PatchApplyError):
        assert isinstance(apply_json_patch(POD, ops), dict)
